//! User-space verbs connecting to another node through rdma_cm (librdmacm), the way an
//! application does it: the baseline krcore is measured against across nodes (issue
//! 12). A fresh process pays every stage: the event channel and id, address and route
//! resolution (librdmacm opens the device then), the PD, CQ and QP, the MR, and the
//! connection, whose accept carries the server's MR descriptor (address and rkey) as
//! private data: no shortcut a real application would not have.

use std::net::Ipv4Addr;
use std::ptr;
use std::time::{Duration, Instant};

use rdma_sys::*;

use crate::verbs::{fail as err, fail_code as err_code, Result};

/// What the server's accept tells a client: its memory's address, length and rkey.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Descriptor {
    /// Start address.
    pub addr: u64,
    /// Length.
    pub len: u32,
    /// Remote key.
    pub rkey: u32,
}

/// How long each stage of a client's connection took.
#[derive(Clone, Copy, Debug, Default)]
pub struct Stages {
    /// The event channel and the id.
    pub id: Duration,
    /// Address resolution (opens the device in a fresh process).
    pub resolve_addr: Duration,
    /// Route resolution.
    pub resolve_route: Duration,
    /// PD, CQ and QP.
    pub qp: Duration,
    /// The local MR.
    pub reg_mr: Duration,
    /// Connect until established (the descriptor exchanged).
    pub connect: Duration,
}

impl Stages {
    /// All of them.
    pub fn total(&self) -> Duration {
        self.id + self.resolve_addr + self.resolve_route + self.qp + self.reg_mr + self.connect
    }
}

fn sockaddr(ip: Ipv4Addr, port: u16) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as u16,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    }
}

/// Waits on `ch` for the next event: its type, status, id and private data (up to 56
/// bytes from a request, more from an accept or a refusal).
fn next_event(
    ch: *mut rdma_event_channel,
) -> Result<(rdma_cm_event_type::Type, i32, *mut rdma_cm_id, Vec<u8>)> {
    let mut ev: *mut rdma_cm_event = ptr::null_mut();
    // SAFETY: a live channel; `ev` receives an event we acknowledge below.
    if unsafe { rdma_get_cm_event(ch, &mut ev) } != 0 {
        return err("rdma_get_cm_event");
    }
    // SAFETY: a live event until acknowledged.
    let got = unsafe {
        let e = &*ev;
        let c = e.param.conn;
        let data = if c.private_data.is_null() {
            Vec::new()
        } else {
            std::slice::from_raw_parts(c.private_data.cast::<u8>(), c.private_data_len as usize)
                .to_vec()
        };
        (e.event, e.status, e.id, data)
    };
    // SAFETY: acknowledged once.
    unsafe { rdma_ack_cm_event(ev) };
    Ok(got)
}

/// Waits on `ch` for the next event, which must be `want`; returns its private data
/// (up to 56 bytes) and the id it names.
fn expect_event(
    ch: *mut rdma_event_channel,
    want: rdma_cm_event_type::Type,
    call: &'static str,
) -> Result<(*mut rdma_cm_id, Vec<u8>)> {
    let (kind, status, id, data) = next_event(ch)?;
    if kind != want {
        return err_code(
            call,
            if status != 0 {
                status.abs()
            } else {
                libc::ECONNREFUSED
            },
        );
    }
    Ok((id, data))
}

/// QP attributes for a connection: `depth` sends, `recvs` receives (at least one), one
/// SGE.
fn qp_attr(cq: *mut ibv_cq, depth: u32, recvs: u32) -> ibv_qp_init_attr {
    // SAFETY: plain data.
    let mut a: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
    a.send_cq = cq;
    a.recv_cq = cq;
    a.qp_type = ibv_qp_type::IBV_QPT_RC;
    a.cap.max_send_wr = depth;
    a.cap.max_recv_wr = recvs.max(1);
    a.cap.max_send_sge = 1;
    a.cap.max_recv_sge = 1;
    a
}

fn conn_param(data: Option<&Descriptor>) -> rdma_conn_param {
    // SAFETY: plain data.
    let mut p: rdma_conn_param = unsafe { std::mem::zeroed() };
    p.responder_resources = 16;
    p.initiator_depth = 16;
    p.retry_count = 7;
    p.rnr_retry_count = 7;
    if let Some(d) = data {
        p.private_data = (d as *const Descriptor).cast();
        p.private_data_len = std::mem::size_of::<Descriptor>() as u8;
    }
    p
}

/// How a listener answered a [`Client::knock`].
#[derive(Debug)]
pub enum Knock {
    /// Accepted: a QP, connected (the accept's private data).
    Accepted(Vec<u8>),
    /// Refused (the event's status: the CM's reason; the refusal's private data).
    Refused(i32, Vec<u8>),
    /// No answer of either kind (an event type and status).
    Failed(rdma_cm_event_type::Type, i32),
}

/// A client's connection to a server's memory.
pub struct Client {
    ch: *mut rdma_event_channel,
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    cq: *mut ibv_cq,
    mr: *mut ibv_mr,
    buf: Vec<u64>,
    /// The server's memory.
    pub remote: Descriptor,
}

impl Client {
    /// Everything of a connection to `ip`:`port` but the request: resolved (from the
    /// local address `src`, or the route's), with its PD, CQ, QP and an MR of `len`
    /// bytes, each stage timed.
    fn open(
        src: Option<Ipv4Addr>,
        ip: Ipv4Addr,
        port: u16,
        len: usize,
    ) -> Result<(Client, Stages)> {
        let mut st = Stages::default();
        let t = Instant::now();
        // SAFETY: plain call.
        let ch = unsafe { rdma_create_event_channel() };
        if ch.is_null() {
            return err("rdma_create_event_channel");
        }
        let mut c = Client {
            ch,
            id: ptr::null_mut(),
            pd: ptr::null_mut(),
            cq: ptr::null_mut(),
            mr: ptr::null_mut(),
            buf: vec![0; len.div_ceil(8)],
            remote: Descriptor::default(),
        };
        // SAFETY: a live channel; `c.id` receives the id (destroyed in Drop).
        if unsafe { rdma_create_id(ch, &mut c.id, ptr::null_mut(), rdma_port_space::RDMA_PS_TCP) }
            != 0
        {
            return err("rdma_create_id");
        }
        st.id = t.elapsed();
        let t = Instant::now();
        let mut dst = sockaddr(ip, port);
        let mut from = src.map(|a| sockaddr(a, 0));
        // SAFETY: a live id; `dst` and `from` outlive the call.
        let r = unsafe {
            rdma_resolve_addr(
                c.id,
                from.as_mut()
                    .map_or(ptr::null_mut(), |f| (f as *mut libc::sockaddr_in).cast()),
                (&mut dst as *mut libc::sockaddr_in).cast(),
                2000,
            )
        };
        if r != 0 {
            return err("rdma_resolve_addr");
        }
        expect_event(
            ch,
            rdma_cm_event_type::RDMA_CM_EVENT_ADDR_RESOLVED,
            "address resolution",
        )?;
        st.resolve_addr = t.elapsed();
        let t = Instant::now();
        // SAFETY: a live id.
        if unsafe { rdma_resolve_route(c.id, 2000) } != 0 {
            return err("rdma_resolve_route");
        }
        expect_event(
            ch,
            rdma_cm_event_type::RDMA_CM_EVENT_ROUTE_RESOLVED,
            "route resolution",
        )?;
        st.resolve_route = t.elapsed();
        let t = Instant::now();
        // SAFETY: the id's device context is open once the address is resolved.
        unsafe {
            c.pd = ibv_alloc_pd((*c.id).verbs);
            if c.pd.is_null() {
                return err("ibv_alloc_pd");
            }
            c.cq = ibv_create_cq((*c.id).verbs, 64, ptr::null_mut(), ptr::null_mut(), 0);
            if c.cq.is_null() {
                return err("ibv_create_cq");
            }
            let mut a = qp_attr(c.cq, 32, 1);
            if rdma_create_qp(c.id, c.pd, &mut a) != 0 {
                return err("rdma_create_qp");
            }
        }
        st.qp = t.elapsed();
        let t = Instant::now();
        let access = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0 as i32;
        // SAFETY: `buf` lives as long as the MR (deregistered in Drop first).
        c.mr = unsafe { ibv_reg_mr(c.pd, c.buf.as_mut_ptr().cast(), len, access) };
        if c.mr.is_null() {
            return err("ibv_reg_mr");
        }
        st.reg_mr = t.elapsed();
        Ok((c, st))
    }

    /// Asks the listener at `ip`:`port` for a connection whose request carries
    /// `private` (56 bytes at most) as its private data, as any host on the segment
    /// could: whether it was accepted, with the accept's private data, or refused,
    /// with the refusal's.
    pub fn knock(ip: Ipv4Addr, port: u16, private: &[u8]) -> Result<Knock> {
        Self::prepared(ip, port)?.ask(private)
    }

    /// A client with everything of a request to `ip`:`port` but the request: its
    /// source port and QP number ([`names`](Self::names)) known, for a proof that binds
    /// them, before [`ask`](Self::ask).
    pub fn prepared(ip: Ipv4Addr, port: u16) -> Result<Client> {
        Self::open(None, ip, port, 64).map(|(c, _)| c)
    }

    /// The source port (host order) and QP number a request of this client carries.
    pub fn names(&self) -> (u16, u32) {
        // SAFETY: a live id with its QP (made by `open`).
        unsafe {
            (
                u16::from_be(rdma_get_src_port(self.id)),
                (*(*self.id).qp).qp_num,
            )
        }
    }

    /// Sends the request, carrying `private` (56 bytes at most), and waits for the
    /// answer: accepted (the client then holds the connection), or refused.
    pub fn ask(&self, private: &[u8]) -> Result<Knock> {
        let c = self;
        let mut p = conn_param(None);
        p.private_data = private.as_ptr().cast();
        p.private_data_len = private.len() as u8;
        // SAFETY: a live id with its QP; `private` outlives the call.
        if unsafe { rdma_connect(c.id, &mut p) } != 0 {
            return err("rdma_connect");
        }
        let (kind, status, _, data) = next_event(c.ch)?;
        Ok(match kind {
            rdma_cm_event_type::RDMA_CM_EVENT_ESTABLISHED => Knock::Accepted(data),
            rdma_cm_event_type::RDMA_CM_EVENT_REJECTED => Knock::Refused(status, data),
            other => Knock::Failed(other, status),
        })
    }

    /// Sends the listener at `ip`:`port` a connection request from the local address
    /// `src` carrying `private` (56 bytes at most), and returns without waiting for an
    /// answer (which goes to `src`: a host claiming another's address never sees it).
    /// The request lives, and the CM sends it again unanswered, until the client drops.
    pub fn request_from(src: Ipv4Addr, ip: Ipv4Addr, port: u16, private: &[u8]) -> Result<Client> {
        let (c, _) = Self::open(Some(src), ip, port, 64)?;
        let mut p = conn_param(None);
        p.private_data = private.as_ptr().cast();
        p.private_data_len = private.len() as u8;
        // SAFETY: a live id with its QP; `private` outlives the call.
        if unsafe { rdma_connect(c.id, &mut p) } != 0 {
            return err("rdma_connect");
        }
        Ok(c)
    }

    /// Connects to the server at `ip`:`port` with a local buffer of `len` bytes, timing
    /// each stage.
    pub fn connect(ip: Ipv4Addr, port: u16, len: usize) -> Result<(Client, Stages)> {
        let (mut c, mut st) = Self::open(None, ip, port, len)?;
        let t = Instant::now();
        let mut p = conn_param(None);
        // SAFETY: a live id with its QP.
        if unsafe { rdma_connect(c.id, &mut p) } != 0 {
            return err("rdma_connect");
        }
        let (_, data) = expect_event(
            c.ch,
            rdma_cm_event_type::RDMA_CM_EVENT_ESTABLISHED,
            "connect",
        )?;
        if data.len() < std::mem::size_of::<Descriptor>() {
            return err_code("the accept's descriptor", libc::EPROTO);
        }
        // SAFETY: at least a Descriptor's bytes, read unaligned.
        c.remote = unsafe { ptr::read_unaligned(data.as_ptr().cast::<Descriptor>()) };
        st.connect = t.elapsed();
        Ok((c, st))
    }

    /// Posts one work request chain: for each `(wr_id, opcode, local offset, remote
    /// offset, len)`, signaled. Remote offsets are into the server's memory (READ);
    /// a SEND ignores its remote offset.
    fn post(&mut self, wrs: &[(u64, ibv_wr_opcode::Type, u64, u64, u32)]) -> Result<()> {
        let total = wrs.iter().map(|w| w.2 + w.4 as u64).max().unwrap_or(0);
        if total > self.buf.len() as u64 * 8 || wrs.is_empty() {
            return err_code("work requests beyond the local buffer", libc::EINVAL);
        }
        // SAFETY: a live MR.
        let lkey = unsafe { (*self.mr).lkey };
        let base = self.buf.as_ptr() as u64;
        let mut sges: Vec<ibv_sge> = wrs
            .iter()
            .map(|w| ibv_sge {
                addr: base + w.2,
                length: w.4,
                lkey,
            })
            .collect();
        // SAFETY: plain data; linked below, each naming its own SGE.
        let mut chain: Vec<ibv_send_wr> = (0..wrs.len())
            .map(|_| unsafe { std::mem::zeroed() })
            .collect();
        for (i, (wr, w)) in chain.iter_mut().zip(wrs).enumerate() {
            wr.wr_id = w.0;
            wr.sg_list = &mut sges[i];
            wr.num_sge = 1;
            wr.opcode = w.1;
            wr.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
            wr.wr.rdma.remote_addr = self.remote.addr + w.3;
            wr.wr.rdma.rkey = self.remote.rkey;
        }
        for i in 1..chain.len() {
            let next: *mut ibv_send_wr = &mut chain[i];
            chain[i - 1].next = next;
        }
        let mut bad: *mut ibv_send_wr = ptr::null_mut();
        // SAFETY: a live connected QP; the chain and its SGEs outlive the call.
        let r = unsafe { ibv_post_send((*self.id).qp, chain.as_mut_ptr(), &mut bad) };
        if r != 0 {
            return err_code("ibv_post_send", r);
        }
        Ok(())
    }

    /// Posts an 8-byte-aligned READ of `len` bytes at `remote` in the server's memory
    /// into `local` of the client's buffer, not waited for.
    pub fn post_read(&mut self, wr_id: u64, local: u64, remote: u64, len: u32) -> Result<()> {
        self.post(&[(wr_id, ibv_wr_opcode::IBV_WR_RDMA_READ, local, remote, len)])
    }

    /// Posts a SEND of `len` bytes at `local` of the client's buffer into a receive the
    /// server keeps posted (see [`serve`]'s `recvs`), not waited for.
    pub fn post_send(&mut self, wr_id: u64, local: u64, len: u32) -> Result<()> {
        self.post(&[(wr_id, ibv_wr_opcode::IBV_WR_SEND, local, 0, len)])
    }

    /// Posts a receive of `len` bytes at `local` of the client's buffer (one may be
    /// outstanding), not waited for.
    pub fn post_recv(&mut self, wr_id: u64, local: u64, len: u32) -> Result<()> {
        if local + len as u64 > self.buf.len() as u64 * 8 {
            return err("a receive past the client's buffer");
        }
        // SAFETY: a live QP; the range lies in the client's buffer, registered with
        // local write (checked above).
        unsafe {
            let base = self.buf.as_mut_ptr() as u64;
            post_recv((*self.id).qp, (*self.mr).lkey, base + local, len, wr_id)
        }
    }

    /// The client's buffer, which its SENDs go from and its receives land in (nothing
    /// may be in flight while it is changed or read).
    pub fn bytes(&mut self) -> &mut [u8] {
        let len = self.buf.len() * 8;
        // SAFETY: the Vec's own bytes, borrowed mutably with it.
        unsafe { std::slice::from_raw_parts_mut(self.buf.as_mut_ptr().cast(), len) }
    }

    /// Waits (busy) for at least `min` successful completions, 10 s at most; how many.
    pub fn poll(&mut self, min: usize) -> Result<usize> {
        poll(self.cq, min)
    }

    /// RDMA READs of each `(offset, len)` range of the server's memory, all posted in
    /// one chain and waited for together; their bytes, one after another (at most the
    /// local buffer's length in all).
    pub fn read(&mut self, ranges: &[(u64, u32)]) -> Result<Vec<u8>> {
        let mut wrs = Vec::with_capacity(ranges.len());
        let mut at = 0u64;
        for (i, &(offset, len)) in ranges.iter().enumerate() {
            wrs.push((i as u64, ibv_wr_opcode::IBV_WR_RDMA_READ, at, offset, len));
            at += len as u64;
        }
        self.post(&wrs)?;
        let mut got = 0;
        while got < ranges.len() {
            got += poll(self.cq, ranges.len() - got)?;
        }
        // SAFETY: the READs completed; `at` bytes of our own buffer (checked by post).
        Ok(
            unsafe { std::slice::from_raw_parts(self.buf.as_ptr().cast::<u8>(), at as usize) }
                .to_vec(),
        )
    }
}

impl crate::kv::Reader for Client {
    fn read(&mut self, ranges: &[(u64, u32)]) -> std::result::Result<Vec<u8>, String> {
        Client::read(self, ranges).map_err(|e| e.to_string())
    }
}

/// Waits (busy) for at least `n` successful completions on `cq`, 10 s at most; how many
/// it reaped (up to 16 beyond `n` may come at once).
fn poll(cq: *mut ibv_cq, n: usize) -> Result<usize> {
    let until = Instant::now() + Duration::from_secs(10);
    let mut got = 0;
    // SAFETY: plain data.
    let mut wc: [ibv_wc; 16] = unsafe { std::mem::zeroed() };
    while got < n {
        // SAFETY: a live CQ, 16 entries of room.
        let r = unsafe { ibv_poll_cq(cq, 16, wc.as_mut_ptr()) };
        if r < 0 {
            return err_code("ibv_poll_cq", -r);
        }
        for w in &wc[..r as usize] {
            if w.status != ibv_wc_status::IBV_WC_SUCCESS {
                return err_code(
                    "work completion (status in errno position)",
                    w.status as i32,
                );
            }
        }
        got += r as usize;
        if r == 0 && Instant::now() > until {
            return err_code("ibv_poll_cq (timed out)", libc::ETIMEDOUT);
        }
    }
    Ok(got)
}

impl Drop for Client {
    fn drop(&mut self) {
        // SAFETY: each object was made here and is released once, in reverse order.
        unsafe {
            if !self.id.is_null() {
                rdma_disconnect(self.id);
            }
            if !self.mr.is_null() {
                ibv_dereg_mr(self.mr);
            }
            if !self.id.is_null() && !(*self.id).qp.is_null() {
                rdma_destroy_qp(self.id);
            }
            if !self.cq.is_null() {
                ibv_destroy_cq(self.cq);
            }
            if !self.pd.is_null() {
                ibv_dealloc_pd(self.pd);
            }
            if !self.id.is_null() {
                rdma_destroy_id(self.id);
            }
            rdma_destroy_event_channel(self.ch);
        }
    }
}

/// The bytes each receive the server keeps posted takes.
pub const RECV_LEN: u32 = 64;

/// Posts a receive of `len` bytes at `addr` (in the MR whose local key is `lkey`) on
/// `qp`, as `wr_id`.
///
/// # Safety
/// `qp` is live, and `addr..addr + len` lies in a live MR of its PD with local write.
unsafe fn post_recv(qp: *mut ibv_qp, lkey: u32, addr: u64, len: u32, wr_id: u64) -> Result<()> {
    let mut sge = ibv_sge {
        addr,
        length: len,
        lkey,
    };
    // SAFETY: plain data.
    let mut wr: ibv_recv_wr = unsafe { std::mem::zeroed() };
    wr.wr_id = wr_id;
    wr.sg_list = &mut sge;
    wr.num_sge = 1;
    let mut bad: *mut ibv_recv_wr = ptr::null_mut();
    // SAFETY: a live QP; `wr` and `sge` outlive the call.
    let r = unsafe { ibv_post_recv(qp, &mut wr, &mut bad) };
    if r != 0 {
        return err_code("ibv_post_recv", r);
    }
    Ok(())
}

/// Posts a signaled SEND of `len` bytes at `addr` (in the MR whose local key is `lkey`)
/// on `qp`, as `wr_id`.
///
/// # Safety
/// `qp` is live and connected, and `addr..addr + len` lies in a live MR of its PD.
unsafe fn post_send(qp: *mut ibv_qp, lkey: u32, addr: u64, len: u32, wr_id: u64) -> Result<()> {
    let mut sge = ibv_sge {
        addr,
        length: len,
        lkey,
    };
    // SAFETY: plain data.
    let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
    wr.wr_id = wr_id;
    wr.sg_list = &mut sge;
    wr.num_sge = 1;
    wr.opcode = ibv_wr_opcode::IBV_WR_SEND;
    wr.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
    let mut bad: *mut ibv_send_wr = ptr::null_mut();
    // SAFETY: a live QP; `wr` and `sge` outlive the call.
    let r = unsafe { ibv_post_send(qp, &mut wr, &mut bad) };
    if r != 0 {
        return err_code("ibv_post_send", r);
    }
    Ok(())
}

/// What a server does with the receives it keeps posted on each connection.
#[derive(Clone, Copy, Debug)]
pub enum Recvs {
    /// `n` receives; each SEND's bytes are dropped and its receive posted again at once.
    Drop(u32),
    /// `n` receives; each SEND's bytes are sent back on its connection (an RPC echo),
    /// and its receive is posted again once that reply completed.
    Echo(u32),
}

/// Receive slots a server has, all connections together: each posted receive takes
/// one ([`RECV_LEN`] bytes) until it is posted again.
const SLOTS: usize = 8192;
/// A server's reply's `wr_id`: its slot with this bit.
const REPLY: u64 = 1 << 32;

/// How a dialer's QP answered an impostor (see [`Listener::impostor`]).
#[derive(Debug)]
pub struct Impostor {
    /// The dialer's request (its private data).
    pub request: Vec<u8>,
    /// The status of the READ posted on the accepted connection (`ibv_wc_status`);
    /// none when it did not complete in its time (nothing answered it).
    pub read: Option<u32>,
}

/// A bound rdma_cm id listening on a port: clients may connect once
/// [`bind`](Listener::bind) returns (their requests wait in the backlog until
/// [`serve`](Listener::serve) accepts them).
pub struct Listener {
    ch: *mut rdma_event_channel,
    id: *mut rdma_cm_id,
}

impl Listener {
    /// Binds `port` on every address and listens.
    pub fn bind(port: u16) -> Result<Listener> {
        // SAFETY: plain call.
        let ch = unsafe { rdma_create_event_channel() };
        if ch.is_null() {
            return err("rdma_create_event_channel");
        }
        let mut l = Listener {
            ch,
            id: ptr::null_mut(),
        };
        // SAFETY: a live channel; `l.id` receives the id (destroyed in Drop).
        if unsafe { rdma_create_id(ch, &mut l.id, ptr::null_mut(), rdma_port_space::RDMA_PS_TCP) }
            != 0
        {
            return err("rdma_create_id");
        }
        let mut any = sockaddr(Ipv4Addr::UNSPECIFIED, port);
        // SAFETY: a live id; `any` outlives the call.
        if unsafe { rdma_bind_addr(l.id, (&mut any as *mut libc::sockaddr_in).cast()) } != 0 {
            return err("rdma_bind_addr");
        }
        // SAFETY: a bound id.
        if unsafe { rdma_listen(l.id, 64) } != 0 {
            return err("rdma_listen");
        }
        Ok(l)
    }

    /// Plays a listener that refuses whatever asks for `secs`, each refusal carrying
    /// `refusal` as its private data: how many it refused.
    pub fn refuse_all(self, refusal: &[u8], secs: u64) -> Result<usize> {
        let until = Instant::now() + Duration::from_secs(secs);
        let mut refused = 0;
        while let Some(left) = until.checked_duration_since(Instant::now()) {
            let mut pfd = libc::pollfd {
                // SAFETY: a live channel.
                fd: unsafe { (*self.ch).fd },
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one pollfd.
            if unsafe { libc::poll(&mut pfd, 1, left.as_millis().min(1000) as i32) } <= 0 {
                continue;
            }
            let (id, _) = expect_event(
                self.ch,
                rdma_cm_event_type::RDMA_CM_EVENT_CONNECT_REQUEST,
                "a connection request",
            )?;
            // SAFETY: a request's id; `refusal` outlives the call; the id is ours to
            // destroy once refused.
            unsafe {
                rdma_reject(id, refusal.as_ptr().cast(), refusal.len() as u8);
                rdma_destroy_id(id);
            }
            refused += 1;
        }
        Ok(refused)
    }

    /// Plays a listener that accepts whatever asks, with `accept` as the accept's
    /// private data, and at once posts an 8-byte RDMA READ (address 0, rkey 0) on the
    /// connection, as an impostor would to find out whether the dialer's QP answers
    /// before it checked the accept. Waits `secs` for the request, then `read_secs` for
    /// the READ's completion: the dialer's QP answers with a remote access error (it was
    /// ready to receive), or never.
    pub fn impostor(self, accept: &[u8], secs: u64, read_secs: u64) -> Result<Impostor> {
        let mut pfd = libc::pollfd {
            // SAFETY: a live channel.
            fd: unsafe { (*self.ch).fd },
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd.
        if unsafe { libc::poll(&mut pfd, 1, (secs * 1000) as i32) } <= 0 {
            return err_code("a connection request", libc::ETIMEDOUT);
        }
        let (id, request) = expect_event(
            self.ch,
            rdma_cm_event_type::RDMA_CM_EVENT_CONNECT_REQUEST,
            "a connection request",
        )?;
        let mut buf = [0u64; 1];
        // SAFETY: the request's id carries its device context; the objects live to the
        // end of the process (the run ends with it).
        let (qp, cq, mr) = unsafe {
            let pd = ibv_alloc_pd((*id).verbs);
            let cq = ibv_create_cq((*id).verbs, 16, ptr::null_mut(), ptr::null_mut(), 0);
            if pd.is_null() || cq.is_null() {
                return err("the impostor's PD and CQ");
            }
            let mut a = qp_attr(cq, 4, 1);
            if rdma_create_qp(id, pd, &mut a) != 0 {
                return err("rdma_create_qp");
            }
            let access = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0 as i32;
            let mr = ibv_reg_mr(pd, buf.as_mut_ptr().cast(), 8, access);
            if mr.is_null() {
                return err("ibv_reg_mr");
            }
            ((*id).qp, cq, mr)
        };
        let mut p = conn_param(None);
        p.private_data = accept.as_ptr().cast();
        p.private_data_len = accept.len() as u8;
        // Few retries: a dialer that never answers fails the READ in seconds.
        p.retry_count = 2;
        // SAFETY: a request's id with its QP; `accept` outlives the call.
        if unsafe { rdma_accept(id, &mut p) } != 0 {
            return err("rdma_accept");
        }
        // SAFETY: plain data, naming the MR's buffer.
        let mut sge = ibv_sge {
            addr: buf.as_mut_ptr() as u64,
            length: 8,
            lkey: unsafe { (*mr).lkey },
        };
        // SAFETY: plain data.
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_READ;
        wr.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
        let mut bad: *mut ibv_send_wr = ptr::null_mut();
        // SAFETY: a QP the accept made ready to send; `wr` and `sge` outlive the call.
        let r = unsafe { ibv_post_send(qp, &mut wr, &mut bad) };
        if r != 0 {
            return err_code("ibv_post_send", r);
        }
        let until = Instant::now() + Duration::from_secs(read_secs);
        // SAFETY: plain data.
        let mut wc: ibv_wc = unsafe { std::mem::zeroed() };
        while Instant::now() < until {
            // SAFETY: a live CQ, one entry of room.
            if unsafe { ibv_poll_cq(cq, 1, &mut wc) } > 0 {
                return Ok(Impostor {
                    request,
                    read: Some(wc.status),
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(Impostor {
            request,
            read: None,
        })
    }

    /// Serves `mem` to `conns` clients, each connection accepted with its descriptor
    /// (READ access only) and receives kept posted as `recvs` says (each SEND a client
    /// makes consumes one, dropped or echoed), until `conns` clients connected and left
    /// or `secs` passed. It sleeps between events: the CM's and the CQ's channels are
    /// polled together.
    pub fn serve(self, mem: &mut [u8], conns: usize, secs: u64, recvs: Recvs) -> Result<()> {
        let (recvs, echo) = match recvs {
            Recvs::Drop(n) => (n, false),
            Recvs::Echo(n) => (n, true),
        };
        let ch = self.ch;
        let len = mem.len();
        let (mut pd, mut cq, mut mr, mut scratch_mr): (
            *mut ibv_pd,
            *mut ibv_cq,
            *mut ibv_mr,
            *mut ibv_mr,
        ) = (
            ptr::null_mut(),
            ptr::null_mut(),
            ptr::null_mut(),
            ptr::null_mut(),
        );
        let mut comp: *mut ibv_comp_channel = ptr::null_mut();
        // Each posted receive's own slot, so an echo sends back its own bytes.
        let mut scratch = vec![0u8; SLOTS * RECV_LEN as usize];
        let base = scratch.as_ptr() as u64;
        let at = |slot: u64| base + slot * RECV_LEN as u64;
        let mut free: Vec<u64> = (0..SLOTS as u64).rev().collect();
        // Live connections by QP number, for reposting their receives.
        let mut qps: std::collections::HashMap<u32, *mut ibv_qp> = std::collections::HashMap::new();
        let (mut accepted, mut left, mut received) = (0usize, 0usize, 0u64);
        let until = Instant::now() + Duration::from_secs(secs);
        while left < conns && Instant::now() < until {
            // SAFETY: live channels' descriptors, polled with a bound so `secs` holds when
            // no client comes.
            let mut pfd = [
                libc::pollfd {
                    fd: unsafe { (*ch).fd },
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: if comp.is_null() {
                        -1
                    } else {
                        unsafe { (*comp).fd }
                    },
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: two pollfds (a negative fd is ignored).
            if unsafe { libc::poll(pfd.as_mut_ptr(), 2, 500) } <= 0 {
                continue;
            }
            if pfd[1].revents != 0 {
                // SAFETY: the channel is readable: one event to take, acknowledge and re-arm
                // before draining, so no completion slips between the drain and the arm.
                unsafe {
                    let (mut ev_cq, mut ctx) = (ptr::null_mut(), ptr::null_mut());
                    if ibv_get_cq_event(comp, &mut ev_cq, &mut ctx) != 0 {
                        return err("ibv_get_cq_event");
                    }
                    ibv_ack_cq_events(ev_cq, 1);
                    if ibv_req_notify_cq(cq, 0) != 0 {
                        return err("ibv_req_notify_cq");
                    }
                }
                // SAFETY: plain data.
                let mut wc: [ibv_wc; 16] = unsafe { std::mem::zeroed() };
                loop {
                    // SAFETY: a live CQ, 16 entries of room.
                    let n = unsafe { ibv_poll_cq(cq, 16, wc.as_mut_ptr()) };
                    if n <= 0 {
                        break;
                    }
                    for w in &wc[..n as usize] {
                        let slot = w.wr_id & !REPLY;
                        // A flushed request of a connection that left finds no QP here.
                        let qp = match (w.status, qps.get(&w.qp_num)) {
                            (ibv_wc_status::IBV_WC_SUCCESS, Some(&qp)) => qp,
                            _ => {
                                free.push(slot);
                                continue;
                            }
                        };
                        if w.wr_id & REPLY == 0 {
                            received += 1;
                        }
                        // SAFETY: a live QP of this PD; the slot is this request's, in the
                        // scratch MR, which lives to the end.
                        unsafe {
                            let lkey = (*scratch_mr).lkey;
                            if echo && w.wr_id & REPLY == 0 {
                                post_send(qp, lkey, at(slot), w.byte_len, slot | REPLY)?;
                            } else {
                                post_recv(qp, lkey, at(slot), RECV_LEN, slot)?;
                            }
                        }
                    }
                }
            }
            if pfd[0].revents == 0 {
                continue;
            }
            let mut ev: *mut rdma_cm_event = ptr::null_mut();
            // SAFETY: a live channel.
            if unsafe { rdma_get_cm_event(ch, &mut ev) } != 0 {
                return err("rdma_get_cm_event");
            }
            // SAFETY: a live event until acknowledged.
            let (kind, id) = unsafe { ((*ev).event, (*ev).id) };
            match kind {
                rdma_cm_event_type::RDMA_CM_EVENT_CONNECT_REQUEST => {
                    // SAFETY: the request's id carries its device context; objects made
                    // once (the first request's device is the only one here).
                    unsafe {
                        if pd.is_null() {
                            pd = ibv_alloc_pd((*id).verbs);
                            comp = ibv_create_comp_channel((*id).verbs);
                            cq = ibv_create_cq((*id).verbs, 1024, ptr::null_mut(), comp, 0);
                            let access = (ibv_access_flags::IBV_ACCESS_LOCAL_WRITE
                                | ibv_access_flags::IBV_ACCESS_REMOTE_READ)
                                .0 as i32;
                            mr = ibv_reg_mr(pd, mem.as_mut_ptr().cast(), len, access);
                            scratch_mr = ibv_reg_mr(
                                pd,
                                scratch.as_mut_ptr().cast(),
                                scratch.len(),
                                ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0 as i32,
                            );
                            if pd.is_null()
                                || comp.is_null()
                                || cq.is_null()
                                || mr.is_null()
                                || scratch_mr.is_null()
                            {
                                rdma_ack_cm_event(ev);
                                return err("the server's PD, CQ and MRs");
                            }
                            if ibv_req_notify_cq(cq, 0) != 0 {
                                rdma_ack_cm_event(ev);
                                return err("ibv_req_notify_cq");
                            }
                        }
                        // Room for an echo of every receive.
                        let mut a = qp_attr(cq, recvs.max(4), recvs);
                        let d = Descriptor {
                            addr: mem.as_ptr() as u64,
                            len: len as u32,
                            rkey: (*mr).rkey,
                        };
                        let mut p = conn_param(Some(&d));
                        let mut ok = rdma_create_qp(id, pd, &mut a) == 0;
                        // Receives before the accept: the client may SEND once established.
                        for _ in 0..recvs {
                            let Some(slot) = free.pop() else {
                                rdma_ack_cm_event(ev);
                                return err("receive slots (every one is posted)");
                            };
                            let lkey = (*scratch_mr).lkey;
                            ok = ok && post_recv((*id).qp, lkey, at(slot), RECV_LEN, slot).is_ok();
                        }
                        ok = ok && rdma_accept(id, &mut p) == 0;
                        rdma_ack_cm_event(ev);
                        if !ok {
                            return err("accept");
                        }
                        qps.insert((*(*id).qp).qp_num, (*id).qp);
                    }
                    accepted += 1;
                }
                rdma_cm_event_type::RDMA_CM_EVENT_DISCONNECTED => {
                    // SAFETY: acknowledged before the id (and its QP) goes.
                    unsafe {
                        rdma_ack_cm_event(ev);
                        qps.retain(|_, q| *q != (*id).qp);
                        rdma_destroy_qp(id);
                        rdma_destroy_id(id);
                    }
                    left += 1;
                }
                _ => {
                    // SAFETY: acknowledged once.
                    unsafe { rdma_ack_cm_event(ev) };
                }
            }
        }
        println!(
            "served {accepted} rdma_cm connection(s), {left} left, {received} SENDs received{}",
            if echo { " and echoed" } else { "" }
        );
        // SAFETY: everything made above, released once.
        unsafe {
            for mr in [mr, scratch_mr] {
                if !mr.is_null() {
                    ibv_dereg_mr(mr);
                }
            }
            if !cq.is_null() {
                ibv_destroy_cq(cq);
            }
            if !comp.is_null() {
                ibv_destroy_comp_channel(comp);
            }
            if !pd.is_null() {
                ibv_dealloc_pd(pd);
            }
        }
        Ok(())
    }
}

// SAFETY: librdmacm's ids and channels may be used from any thread; a Listener is
// owned, so one thread at a time uses it.
unsafe impl Send for Listener {}

impl Drop for Listener {
    fn drop(&mut self) {
        // SAFETY: made in bind, released once; the id before its channel.
        unsafe {
            if !self.id.is_null() {
                rdma_destroy_id(self.id);
            }
            rdma_destroy_event_channel(self.ch);
        }
    }
}

/// Serves `mem` on `port`: [`Listener::bind`] then [`Listener::serve`].
pub fn serve(port: u16, mem: &mut [u8], conns: usize, secs: u64, recvs: Recvs) -> Result<()> {
    Listener::bind(port)?.serve(mem, conns, secs, recvs)
}
