//! The README's C and Python programs stay valid: each C block compiles against
//! krcore.h with warnings as errors, each Python block parses. (Its Rust blocks are
//! doc tests: `ReadmeDoctests` in lib.rs.)

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The fenced blocks of `lang` in the README.
fn blocks(lang: &str) -> Vec<String> {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let open = format!("```{lang}");
    let mut out = Vec::new();
    let mut cur: Option<String> = None;
    for line in readme.lines() {
        match &mut cur {
            None if line.trim_end() == open => cur = Some(String::new()),
            None => {}
            Some(_) if line.trim_end() == "```" => out.extend(cur.take()),
            Some(b) => {
                b.push_str(line);
                b.push('\n');
            }
        }
    }
    assert!(cur.is_none(), "an unclosed ```{lang} block");
    out
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("krcore-readme-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Writes each ```lang block to a scratch file and runs `check` on it, which must succeed.
fn check_each(lang: &str, ext: &str, check: impl Fn(&Path) -> Command) {
    let found = blocks(lang);
    assert!(!found.is_empty(), "the README has a {lang} program");
    for (i, b) in found.iter().enumerate() {
        let src = scratch(&format!("block{i}.{ext}"));
        std::fs::write(&src, b).unwrap();
        let out = check(&src).output().expect("the checker runs");
        assert!(
            out.status.success(),
            "{}: {}{}",
            src.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn readme_c_compiles() {
    check_each("c", "c", |src| {
        let mut cc = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()));
        cc.args(["-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror"])
            .args(["-fsyntax-only", "-I"])
            .arg(root().join("abi/include"))
            .arg("-I")
            .arg(root().join("uring-lib/c"))
            .arg(src);
        cc
    });
}

#[test]
fn readme_python_parses() {
    check_each("python", "py", |src| {
        let mut py = Command::new("python3");
        py.args(["-c", "import ast, sys; ast.parse(open(sys.argv[1]).read())"])
            .arg(src);
        py
    });
}
