//! A cpio "newc" archive writer, enough for the test VM's initramfs: directories,
//! regular files, symlinks and device nodes. The kernel unpacks an uncompressed newc
//! archive directly, so no compressor is needed.

use std::io::{self, Write};

const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFLNK: u32 = 0o120000;
const S_IFCHR: u32 = 0o020000;

/// Builds a newc archive in memory.
#[derive(Default)]
pub struct Cpio {
    buf: Vec<u8>,
    ino: u32,
}

impl Cpio {
    /// A directory.
    pub fn dir(&mut self, path: &str) -> &mut Self {
        self.entry(path, S_IFDIR | 0o755, (0, 0), b"")
    }

    /// A regular file with the given permission bits.
    pub fn file(&mut self, path: &str, perm: u32, data: &[u8]) -> &mut Self {
        self.entry(path, S_IFREG | perm, (0, 0), data)
    }

    /// A symlink to `target`.
    pub fn symlink(&mut self, path: &str, target: &str) -> &mut Self {
        self.entry(path, S_IFLNK | 0o777, (0, 0), target.as_bytes())
    }

    /// A character device node.
    pub fn chardev(&mut self, path: &str, major: u32, minor: u32) -> &mut Self {
        self.entry(path, S_IFCHR | 0o600, (major, minor), b"")
    }

    fn entry(&mut self, path: &str, mode: u32, rdev: (u32, u32), data: &[u8]) -> &mut Self {
        self.ino += 1;
        let name = path.trim_start_matches('/');
        let nlink = if mode & S_IFDIR != 0 { 2 } else { 1 };
        let fields = [
            self.ino,
            mode,
            0,
            0,
            nlink,
            0,
            data.len() as u32,
            0,
            0,
            rdev.0,
            rdev.1,
            name.len() as u32 + 1,
            0,
        ];
        self.buf.extend_from_slice(b"070701");
        for f in fields {
            self.buf.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.push(0);
        self.pad();
        self.buf.extend_from_slice(data);
        self.pad();
        self
    }

    fn pad(&mut self) {
        while self.buf.len() % 4 != 0 {
            self.buf.push(0);
        }
    }

    /// Closes the archive and writes it out.
    pub fn finish(mut self, out: &mut impl Write) -> io::Result<()> {
        self.entry("TRAILER!!!", 0, (0, 0), b"");
        out.write_all(&self.buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newc_header_layout() {
        let mut c = Cpio::default();
        c.file("/init", 0o755, b"hi");
        let mut out = Vec::new();
        c.finish(&mut out).unwrap();
        assert_eq!(&out[..6], b"070701");
        // 6 + 13 * 8 = 110 bytes of header, then "init\0" padded to a multiple of 4.
        assert_eq!(&out[110..115], b"init\0");
        assert_eq!(&out[116..118], b"hi");
        assert_eq!(out.len() % 4, 0);
        assert!(out.windows(10).any(|w| w == b"TRAILER!!!"));
    }
}
