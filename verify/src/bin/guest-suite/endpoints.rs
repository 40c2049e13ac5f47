//! Endpoints as sockets, between users of one node: a held service is its user's, and a
//! message reaches the listen it was sent to, never a CONNECT that came first.

use std::time::Duration;

use krcore_uring::abi::cqe::Reason;
use krcore_uring::abi::opcode::Opcode;
use krcore_uring::abi::sqe::{MrAccess, Sqe};
use krcore_uring::{Batch, Builder, Device, Ring};

use crate::datapath::LOCAL_GID;
use crate::harness::check;
use crate::isolation::Child;
use crate::limits::become_user;

const SERVICE: u32 = 7000;
const SECRET: &[u8] = b"secret of uid 1002";

fn ring() -> Result<Ring, String> {
    Builder::new(16)
        .build(Device::open().map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())
}

/// What a failed call's reason is, as text for a check.
fn reason<T>(r: Result<T, krcore_uring::Error>) -> Option<Reason> {
    r.err().and_then(|e| e.reason())
}

/// uid 1000 LISTENs on 7000 and takes two clients: uid 1001's, which CONNECTed first
/// and posted a receive, and uid 1002's, which sends a secret. uid 1001 can neither
/// LISTEN on 7000, nor name 7000 as its own port, nor take port 80, and its receive
/// gets nothing; the secret arrives on the listen's virtual QP for uid 1002's port.
/// (Before ports, uid 1001's CONNECT paired with uid 1002's and took the secret.)
pub fn a_held_service_is_its_users_alone() -> Result<(), String> {
    let server = Child::spawn(|| {
        become_user(1000, 1 << 20)?;
        let mut r = ring()?;
        let mut l = r.listen(SERVICE).map_err(|e| format!("LISTEN: {e}"))?;
        let mut mr = r
            .register(512, MrAccess::LOCAL_WRITE)
            .map_err(|e| e.to_string())?;
        let mut peers = Vec::new();
        while peers.len() < 2 {
            let a = r
                .accept_timeout(&mut l, Duration::from_secs(30))
                .map_err(|e| format!("accept: {e}"))?;
            peers.push(a);
        }
        for (i, a) in peers.iter().enumerate() {
            let at = mr.addr() + i as u64 * 256;
            let recv = Sqe::two_sided(Opcode::Recv, i as u64, a.vqp.handle(), mr.handle(), at, 256);
            // SAFETY: the region outlives the receives: the process exits with both.
            unsafe { r.submission().push(&recv) }.map_err(|e| e.to_string())?;
        }
        // One of the two sends: the first completion is its receive's.
        r.submit_and_wait_timeout(1, Duration::from_secs(30))
            .map_err(|e| format!("waiting for a message: {e}"))?;
        let c = r.completions().next().ok_or("no completion")?;
        check(c.res > 0, || format!("the receive: {c:?}"))?;
        let (i, len) = (c.user_data as usize, c.res as usize);
        let text = String::from_utf8_lossy(&mr.bytes()[i * 256..i * 256 + len]).into_owned();
        Ok(format!("{}:{text}", peers[i].peer_port))
    })?;
    std::thread::sleep(Duration::from_millis(500));
    let thief = Child::spawn(|| {
        become_user(1001, 1 << 20)?;
        let mut r = ring()?;
        let listen = reason(r.listen(SERVICE));
        check(listen == Some(Reason::ServiceTaken), || {
            format!("uid 1001's LISTEN on a held service: {listen:?}")
        })?;
        let named = reason(r.pair(LOCAL_GID, SERVICE as u16, 40000));
        check(named == Some(Reason::ServiceTaken), || {
            format!("uid 1001 naming the held port as its own: {named:?}")
        })?;
        let low = reason(r.listen(80));
        check(low == Some(Reason::NotPermitted), || {
            format!("uid 1001's LISTEN on port 80: {low:?}")
        })?;
        // A client of the service like any other: the listen accepts it on its own.
        let v = r.connect(LOCAL_GID, SERVICE).map_err(|e| e.to_string())?;
        let mr = r
            .register(256, MrAccess::LOCAL_WRITE)
            .map_err(|e| e.to_string())?;
        let recv = Sqe::two_sided(Opcode::Recv, 7, v.handle(), mr.handle(), mr.addr(), 256);
        // SAFETY: the region outlives the receive: the process exits with both.
        unsafe { r.submission().push(&recv) }.map_err(|e| e.to_string())?;
        match r.submit_and_wait_timeout(1, Duration::from_secs(4)) {
            Err(e) if e.raw_os_error() == Some(libc::ETIME) => Ok("nothing".into()),
            other => Err(format!(
                "uid 1001's receive got something: {other:?} {:?}",
                r.completions().collect::<Vec<_>>()
            )),
        }
    })?;
    std::thread::sleep(Duration::from_millis(500));
    let victim = Child::spawn(|| {
        become_user(1002, 1 << 20)?;
        let mut r = ring()?;
        let v = r.connect(LOCAL_GID, SERVICE).map_err(|e| e.to_string())?;
        let mut mr = r
            .register(256, MrAccess::LOCAL_WRITE)
            .map_err(|e| e.to_string())?;
        mr.bytes_mut()[..SECRET.len()].copy_from_slice(SECRET);
        let mut b = Batch::new();
        b.send(&v, &mr, 0, SECRET.len() as u32, None)
            .map_err(|e| e.to_string())?;
        r.run(b)
            .map_err(|e| e.to_string())?
            .remove(0)
            .map_err(|e| e.to_string())?;
        Ok(v.port().to_string())
    })?;
    let port = victim.join()?;
    let thief = thief.join()?;
    let got = server.join()?;
    println!(
        "  uid 1002 on port {port} sent its secret; the listen got {got:?}; uid 1001: {thief}"
    );
    check(
        got == format!("{port}:{}", String::from_utf8_lossy(SECRET)),
        || format!("the listen got {got:?}, not uid 1002's secret from port {port}"),
    )
}

/// What a hog holds: how many of each it got before `Quota`, and the reason that
/// stopped it, per kind, as text.
fn fill(r: &mut Ring, bufs: &mut Vec<krcore_uring::MemoryRegion>) -> Result<String, String> {
    let mut out = Vec::new();
    // Ports of this user's own (another's would be refused as held).
    // SAFETY: a plain system call.
    let base = 9000 + (unsafe { libc::getuid() } % 100) as u16 * 10;
    // Virtual QPs (one-sided: no endpoint), until refused.
    let mut vqps = Vec::new();
    let why = loop {
        match r.connect(LOCAL_GID, 0) {
            Ok(v) => vqps.push(v),
            Err(e) => break e.reason(),
        }
        if vqps.len() > 64 {
            break None;
        }
    };
    out.push(format!("vqps {} {why:?}", vqps.len()));
    // Receives on a pair of its own, waiting, until refused.
    r.disconnect(vqps.pop().ok_or("no virtual QP")?)
        .map_err(|e| e.to_string())?;
    let v = r.pair(LOCAL_GID, base, base).map_err(|e| e.to_string())?;
    let mr = r
        .register(4096, MrAccess::LOCAL_WRITE)
        .map_err(|e| e.to_string())?;
    let mut n = 0;
    let why = loop {
        let recv = Sqe::two_sided(
            Opcode::Recv,
            100 + n,
            v.handle(),
            mr.handle(),
            mr.addr(),
            64,
        );
        // SAFETY: the region outlives the receives: the process exits with both.
        unsafe { r.submission().push(&recv) }.map_err(|e| e.to_string())?;
        r.submit().map_err(|e| e.to_string())?;
        if let Some(c) = r.completions().next() {
            break c.failure();
        }
        n += 1;
        if n > 64 {
            break None;
        }
    };
    out.push(format!("recvs {n} {why:?}"));
    let remote = MrAccess::LOCAL_WRITE | MrAccess::REMOTE_READ;
    let why = loop {
        match r.register(4096, remote) {
            Ok(m) => bufs.push(m),
            Err(e) => break e.reason(),
        }
        if bufs.len() > 64 {
            break None;
        }
    };
    out.push(format!("exports {} {why:?}", bufs.len()));
    let mut listens = Vec::new();
    let why = loop {
        match r.listen(base as u32 + 1 + listens.len() as u32) {
            Ok(l) => listens.push(l),
            Err(e) => break e.reason(),
        }
        if listens.len() > 8 {
            break None;
        }
    };
    out.push(format!("listens {} {why:?}", listens.len()));
    std::mem::forget(listens);
    std::mem::forget(vqps);
    std::mem::forget(mr);
    Ok(out.join(", "))
}

/// A user that fills its shares of the device's tables (virtual QPs, receives, exports
/// with remote rights, listens; shares lowered to a few) stops at each with `Quota`,
/// and while it holds them another user's CONNECT, RECV, REG_MR with remote rights and
/// LISTEN all succeed. (Before shares, one user filled each table and every other
/// user got `TableFull`.)
pub fn a_user_cannot_fill_what_others_need() -> Result<(), String> {
    use crate::limits::{pipe, signal, wait};
    use verify::guest::Param;
    let _p = [
        Param::set("max_vqps_per_user", "4")?,
        Param::set("max_recvs_per_user", "4")?,
        Param::set("max_exports_per_user", "2")?,
        Param::set("max_listens_per_user", "2")?,
    ];
    let (ready_r, ready_w) = pipe()?;
    let (go_r, go_w) = pipe()?;
    let hog = Child::spawn(move || {
        become_user(1001, 1 << 20)?;
        let mut r = ring()?;
        let mut bufs = Vec::new();
        let report = fill(&mut r, &mut bufs)?;
        signal(ready_w)?;
        wait(go_r)?;
        Ok(report)
    })?;
    wait(ready_r)?;
    let other = Child::spawn(|| {
        become_user(1002, 1 << 20)?;
        let mut r = ring()?;
        let mut bufs = Vec::new();
        fill(&mut r, &mut bufs)
    })?
    .join()?;
    signal(go_w)?;
    let hog = hog.join()?;
    println!("  uid 1001 filled its shares: {hog}");
    println!("  meanwhile uid 1002: {other}");
    let want =
        "vqps 4 Some(Quota), recvs 4 Some(Quota), exports 2 Some(Quota), listens 2 Some(Quota)";
    check(hog == want, || format!("uid 1001: {hog}"))?;
    check(other == want, || {
        format!("uid 1002 while uid 1001 held its shares: {other}")
    })
}

/// uid 1001 CONNECTs to uid 1000's service 300 times (its share of virtual QPs raised to
/// 300, as is uid 1000's): the listen accepts a quarter of its ring's 1,024 virtual QPs
/// from it and refuses the rest `Quota`; uid 1002's CONNECT is still accepted, and uid
/// 1000's own CONNECT is its own share's. (Before, every accept was charged to uid
/// 1000: uid 1001's CONNECTs spent its share, uid 1002 was refused and uid 1000's own
/// CONNECT failed `Quota`.)
pub fn a_client_cannot_spend_a_listeners_share() -> Result<(), String> {
    use crate::limits::{pipe, signal, wait};
    use verify::guest::Param;
    const HOG: usize = 300;
    let service = SERVICE + 1;
    let _p = Param::set("max_vqps_per_user", &HOG.to_string())?;
    let (listening_r, listening_w) = pipe()?;
    let (served_r, served_w) = pipe()?;
    let server = Child::spawn(move || {
        become_user(1000, 1 << 20)?;
        let mut r = ring()?;
        let mut l = r.listen(service).map_err(|e| format!("LISTEN: {e}"))?;
        signal(listening_w)?;
        // Every answer of the listen: the hog's, then the other user's.
        let (mut accepted, mut refused) = (Vec::new(), Vec::new());
        while accepted.len() + refused.len() < HOG + 1 {
            match r.accept_timeout(&mut l, Duration::from_secs(60)) {
                Ok(a) => accepted.push(a),
                Err(e) if e.reason().is_some() => refused.push(e.reason()),
                Err(e) => return Err(format!("accept: {e}")),
            }
        }
        let own = reason(r.connect(LOCAL_GID, 0));
        signal(served_w)?;
        let quota = refused
            .iter()
            .filter(|&&w| w == Some(Reason::Quota))
            .count();
        Ok(format!(
            "accepted {} refused {} (Quota {quota}), own CONNECT {own:?}",
            accepted.len(),
            refused.len()
        ))
    })?;
    wait(listening_r)?;
    let hog = Child::spawn(move || {
        become_user(1001, 1 << 20)?;
        let mut r = ring()?;
        let mut held = Vec::new();
        let mut refused = 0;
        for _ in 0..HOG {
            match r.connect(LOCAL_GID, service) {
                Ok(v) => held.push(v),
                Err(e) if e.reason() == Some(Reason::Refused) => refused += 1,
                Err(e) => return Err(format!("CONNECT {}: {e}", held.len() + refused)),
            }
        }
        // Held until the server has answered everyone.
        wait(served_r)?;
        Ok(format!("{} taken, {refused} refused", held.len()))
    })?;
    // Whenever it comes among the hog's, the other user's CONNECT is its own client's.
    let other = Child::spawn(move || {
        become_user(1002, 1 << 20)?;
        let mut r = ring()?;
        r.connect(LOCAL_GID, service)
            .map(|_| "served".to_string())
            .map_err(|e| e.to_string())
    })?
    .join()
    .map_err(|e| format!("uid 1002: {e}"))?;
    let hog = hog.join()?;
    let got = server.join()?;
    println!("  uid 1001: {hog}; uid 1002: {other}; the listen of uid 1000: {got}");
    let part = 1024 / krcore_abi::engine::CLIENT_SHARE;
    let want = format!(
        "accepted {} refused {} (Quota {}), own CONNECT None",
        part + 1,
        HOG - part,
        HOG - part
    );
    check(got == want, || format!("the listen: {got}, not {want}"))?;
    check(
        hog == format!("{part} taken, {} refused", HOG - part),
        || format!("uid 1001: {hog}"),
    )
}
