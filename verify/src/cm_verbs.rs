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

/// Waits on `ch` for the next event, which must be `want`; returns its private data
/// (up to 56 bytes) and the id it names.
fn expect_event(
    ch: *mut rdma_event_channel,
    want: rdma_cm_event_type::Type,
    call: &'static str,
) -> Result<(*mut rdma_cm_id, Vec<u8>)> {
    let mut ev: *mut rdma_cm_event = ptr::null_mut();
    // SAFETY: a live channel; `ev` receives an event we acknowledge below.
    if unsafe { rdma_get_cm_event(ch, &mut ev) } != 0 {
        return err("rdma_get_cm_event");
    }
    // SAFETY: a live event until acknowledged.
    let (kind, status, id, data) = unsafe {
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

/// QP attributes for a connection: `depth` sends, a few receives, one SGE.
fn qp_attr(cq: *mut ibv_cq, depth: u32) -> ibv_qp_init_attr {
    // SAFETY: plain data.
    let mut a: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
    a.send_cq = cq;
    a.recv_cq = cq;
    a.qp_type = ibv_qp_type::IBV_QPT_RC;
    a.cap.max_send_wr = depth;
    a.cap.max_recv_wr = 4;
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
    /// Connects to the server at `ip`:`port` with a local buffer of `len` bytes, timing
    /// each stage.
    pub fn connect(ip: Ipv4Addr, port: u16, len: usize) -> Result<(Client, Stages)> {
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
        // SAFETY: a live id; `dst` outlives the call.
        let r = unsafe {
            rdma_resolve_addr(
                c.id,
                ptr::null_mut(),
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
            let mut a = qp_attr(c.cq, 32);
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
        let t = Instant::now();
        let mut p = conn_param(None);
        // SAFETY: a live id with its QP.
        if unsafe { rdma_connect(c.id, &mut p) } != 0 {
            return err("rdma_connect");
        }
        let (_, data) = expect_event(ch, rdma_cm_event_type::RDMA_CM_EVENT_ESTABLISHED, "connect")?;
        if data.len() < std::mem::size_of::<Descriptor>() {
            return err_code("the accept's descriptor", libc::EPROTO);
        }
        // SAFETY: at least a Descriptor's bytes, read unaligned.
        c.remote = unsafe { ptr::read_unaligned(data.as_ptr().cast::<Descriptor>()) };
        st.connect = t.elapsed();
        Ok((c, st))
    }

    /// RDMA READs of each `(offset, len)` range of the server's memory, all posted in
    /// one chain and waited for together; their bytes, one after another (at most the
    /// local buffer's length in all).
    pub fn read(&mut self, ranges: &[(u64, u32)]) -> Result<Vec<u8>> {
        let total: u64 = ranges.iter().map(|r| r.1 as u64).sum();
        if total > self.buf.len() as u64 * 8 || ranges.is_empty() {
            return err_code("READ ranges beyond the local buffer", libc::EINVAL);
        }
        // SAFETY: a live MR.
        let lkey = unsafe { (*self.mr).lkey };
        let mut sges = Vec::with_capacity(ranges.len());
        let mut at = self.buf.as_ptr() as u64;
        for &(_, len) in ranges {
            sges.push(ibv_sge {
                addr: at,
                length: len,
                lkey,
            });
            at += len as u64;
        }
        // SAFETY: plain data; linked below, each naming its own SGE.
        let mut wrs: Vec<ibv_send_wr> = (0..ranges.len()).map(|_| unsafe { std::mem::zeroed() }).collect();
        for (i, (wr, &(offset, _))) in wrs.iter_mut().zip(ranges).enumerate() {
            wr.wr_id = i as u64;
            wr.sg_list = &mut sges[i];
            wr.num_sge = 1;
            wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_READ;
            wr.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
            wr.wr.rdma.remote_addr = self.remote.addr + offset;
            wr.wr.rdma.rkey = self.remote.rkey;
        }
        for i in 1..wrs.len() {
            let next: *mut ibv_send_wr = &mut wrs[i];
            wrs[i - 1].next = next;
        }
        let mut bad: *mut ibv_send_wr = ptr::null_mut();
        // SAFETY: a live connected QP; the chain and its SGEs outlive the call.
        let r = unsafe { ibv_post_send((*self.id).qp, wrs.as_mut_ptr(), &mut bad) };
        if r != 0 {
            return err_code("ibv_post_send", r);
        }
        poll(self.cq, ranges.len())?;
        // SAFETY: the READs completed; `total` bytes of our own buffer.
        Ok(unsafe { std::slice::from_raw_parts(self.buf.as_ptr().cast::<u8>(), total as usize) }.to_vec())
    }
}

impl crate::kv::Reader for Client {
    fn read(&mut self, ranges: &[(u64, u32)]) -> std::result::Result<Vec<u8>, String> {
        Client::read(self, ranges).map_err(|e| e.to_string())
    }
}

/// Waits (busy) for `n` successful completions on `cq`, 10 s at most.
fn poll(cq: *mut ibv_cq, n: usize) -> Result<()> {
    let until = Instant::now() + Duration::from_secs(10);
    let mut got = 0;
    while got < n {
        // SAFETY: plain data.
        let mut wc: ibv_wc = unsafe { std::mem::zeroed() };
        // SAFETY: a live CQ, one entry of room.
        let r = unsafe { ibv_poll_cq(cq, 1, &mut wc) };
        if r < 0 {
            return err_code("ibv_poll_cq", -r);
        }
        if r == 1 {
            if wc.status != ibv_wc_status::IBV_WC_SUCCESS {
                return err_code(
                    "work completion (status in errno position)",
                    wc.status as i32,
                );
            }
            got += 1;
        } else if Instant::now() > until {
            return err_code("ibv_poll_cq (timed out)", libc::ETIMEDOUT);
        }
    }
    Ok(())
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

/// Serves `mem` on `port` to `conns` clients, each connection accepted with its
/// descriptor (READ access only), until `conns` clients connected and left or `secs`
/// passed.
pub fn serve(port: u16, mem: &mut [u8], conns: usize, secs: u64) -> Result<()> {
    let len = mem.len();
    // SAFETY: plain call.
    let ch = unsafe { rdma_create_event_channel() };
    if ch.is_null() {
        return err("rdma_create_event_channel");
    }
    let mut listen: *mut rdma_cm_id = ptr::null_mut();
    // SAFETY: a live channel.
    if unsafe {
        rdma_create_id(
            ch,
            &mut listen,
            ptr::null_mut(),
            rdma_port_space::RDMA_PS_TCP,
        )
    } != 0
    {
        return err("rdma_create_id");
    }
    let mut any = sockaddr(Ipv4Addr::UNSPECIFIED, port);
    // SAFETY: a live id; `any` outlives the call.
    if unsafe { rdma_bind_addr(listen, (&mut any as *mut libc::sockaddr_in).cast()) } != 0 {
        return err("rdma_bind_addr");
    }
    // SAFETY: a bound id.
    if unsafe { rdma_listen(listen, 64) } != 0 {
        return err("rdma_listen");
    }
    let (mut pd, mut cq, mut mr): (*mut ibv_pd, *mut ibv_cq, *mut ibv_mr) =
        (ptr::null_mut(), ptr::null_mut(), ptr::null_mut());
    let (mut accepted, mut left) = (0usize, 0usize);
    let until = Instant::now() + Duration::from_secs(secs);
    while left < conns && Instant::now() < until {
        // SAFETY: a live channel's descriptor, polled with a bound so `secs` holds
        // when no client comes.
        let mut pfd = libc::pollfd {
            fd: unsafe { (*ch).fd },
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd.
        if unsafe { libc::poll(&mut pfd, 1, 500) } <= 0 {
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
                        cq = ibv_create_cq((*id).verbs, 256, ptr::null_mut(), ptr::null_mut(), 0);
                        let access = (ibv_access_flags::IBV_ACCESS_LOCAL_WRITE
                            | ibv_access_flags::IBV_ACCESS_REMOTE_READ)
                            .0 as i32;
                        mr = ibv_reg_mr(pd, mem.as_mut_ptr().cast(), len, access);
                        if pd.is_null() || cq.is_null() || mr.is_null() {
                            rdma_ack_cm_event(ev);
                            return err("the server's PD, CQ and MR");
                        }
                    }
                    let mut a = qp_attr(cq, 4);
                    let d = Descriptor {
                        addr: mem.as_ptr() as u64,
                        len: len as u32,
                        rkey: (*mr).rkey,
                    };
                    let mut p = conn_param(Some(&d));
                    let ok = rdma_create_qp(id, pd, &mut a) == 0 && rdma_accept(id, &mut p) == 0;
                    rdma_ack_cm_event(ev);
                    if !ok {
                        return err("accept");
                    }
                }
                accepted += 1;
            }
            rdma_cm_event_type::RDMA_CM_EVENT_DISCONNECTED => {
                // SAFETY: acknowledged before the id (and its QP) goes.
                unsafe {
                    rdma_ack_cm_event(ev);
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
    println!("served {accepted} rdma_cm connection(s), {left} left");
    // SAFETY: everything made above, released once.
    unsafe {
        if !mr.is_null() {
            ibv_dereg_mr(mr);
        }
        if !cq.is_null() {
            ibv_destroy_cq(cq);
        }
        if !pd.is_null() {
            ibv_dealloc_pd(pd);
        }
        rdma_destroy_id(listen);
        rdma_destroy_event_channel(ch);
    }
    Ok(())
}
