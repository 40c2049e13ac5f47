//! Minimal user-space verbs over rdma-sys: an RC QP pair on one device, memory regions,
//! one-sided operations. It is the substrate check of the test bed and the "plain verbs"
//! baseline krcore is measured against, so it does exactly what an application would.

use std::ffi::CStr;
use std::io;
use std::ptr;

use rdma_sys::*;

/// A verbs failure: which call, and the errno it left.
#[derive(Debug)]
pub struct VerbsError {
    /// The verbs call that failed.
    pub call: &'static str,
    /// The OS error.
    pub source: io::Error,
}

impl std::fmt::Display for VerbsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} failed: {}", self.call, self.source)
    }
}

impl std::error::Error for VerbsError {}

/// Result of a verbs helper.
pub type Result<T> = std::result::Result<T, VerbsError>;

pub(crate) fn fail<T>(call: &'static str) -> Result<T> {
    Err(VerbsError {
        call,
        source: io::Error::last_os_error(),
    })
}

pub(crate) fn fail_code<T>(call: &'static str, code: i32) -> Result<T> {
    Err(VerbsError {
        call,
        source: io::Error::from_raw_os_error(code),
    })
}

/// The RoCE v2 IPv4 GID index on rxe in the test VM.
pub const ROCE_V2_GID_INDEX: u8 = 1;
/// The port every helper uses.
pub const PORT: u8 = 1;

/// An opened device with one protection domain and one completion queue.
pub struct Context {
    ctx: *mut ibv_context,
    pd: *mut ibv_pd,
    cq: *mut ibv_cq,
}

impl Context {
    /// Opens the device called `name` and creates a PD and a CQ of `cq_depth` entries.
    pub fn open(name: &str, cq_depth: i32) -> Result<Context> {
        let mut n = 0;
        // SAFETY: plain verbs calls; the list is freed before returning and the chosen
        // device stays valid after ibv_open_device.
        unsafe {
            let list = ibv_get_device_list(&mut n);
            if list.is_null() {
                return fail("ibv_get_device_list");
            }
            let mut ctx = ptr::null_mut();
            for i in 0..n as usize {
                let dev = *list.add(i);
                if CStr::from_ptr(ibv_get_device_name(dev)).to_bytes() == name.as_bytes() {
                    ctx = ibv_open_device(dev);
                    break;
                }
            }
            ibv_free_device_list(list);
            if ctx.is_null() {
                return fail_code(
                    "ibv_open_device (no such device or open failed)",
                    libc::ENODEV,
                );
            }
            let mut c = Context {
                ctx,
                pd: ptr::null_mut(),
                cq: ptr::null_mut(),
            };
            c.pd = ibv_alloc_pd(ctx);
            if c.pd.is_null() {
                return fail("ibv_alloc_pd");
            }
            c.cq = ibv_create_cq(ctx, cq_depth, ptr::null_mut(), ptr::null_mut(), 0);
            if c.cq.is_null() {
                return fail("ibv_create_cq");
            }
            Ok(c)
        }
    }

    /// The GID at `index` of the port.
    pub fn gid(&self, index: u8) -> Result<[u8; 16]> {
        // SAFETY: ibv_gid is plain data; the context is open.
        unsafe {
            let mut gid: ibv_gid = std::mem::zeroed();
            let r = ibv_query_gid(self.ctx, PORT, index as i32, &mut gid);
            if r != 0 {
                return fail_code("ibv_query_gid", r.abs());
            }
            Ok(gid.raw)
        }
    }

    /// Polls the CQ (spinning) until `n` completions arrived or `timeout` passed; fails
    /// on a completion with an error status. The limit is time, not a count of polls:
    /// on a loaded host under emulation a fixed count runs out long before rxe, which
    /// needs the same CPUs, has done its work.
    pub fn poll(&self, n: usize, timeout: std::time::Duration) -> Result<Vec<(u64, u32)>> {
        let mut done = Vec::with_capacity(n);
        let start = std::time::Instant::now();
        let mut polls = 0u64;
        while done.len() < n {
            // SAFETY: ibv_wc is plain data; the CQ is alive.
            let mut wc: ibv_wc = unsafe { std::mem::zeroed() };
            // SAFETY: one entry of room at `wc`.
            let r = unsafe { ibv_poll_cq(self.cq, 1, &mut wc) };
            if r < 0 {
                return fail_code("ibv_poll_cq", -r);
            }
            if r == 1 {
                if wc.status != ibv_wc_status::IBV_WC_SUCCESS {
                    return fail_code(
                        "work completion (status in errno position)",
                        wc.status as i32,
                    );
                }
                done.push((wc.wr_id, wc.byte_len));
            }
            polls += 1;
            if polls % 1024 == 0 && start.elapsed() > timeout {
                return fail_code("ibv_poll_cq (timed out)", libc::ETIMEDOUT);
            }
        }
        Ok(done)
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: each object was created by this context and is destroyed once, QPs and
        // MRs (which borrow the context) having been dropped first.
        unsafe {
            if !self.cq.is_null() {
                ibv_destroy_cq(self.cq);
            }
            if !self.pd.is_null() {
                ibv_dealloc_pd(self.pd);
            }
            ibv_close_device(self.ctx);
        }
    }
}

/// Where a QP can be reached: what the metadata exchange carries.
#[derive(Clone, Copy, Debug)]
pub struct Endpoint {
    /// QP number.
    pub qpn: u32,
    /// GID of the QP's port.
    pub gid: [u8; 16],
}

/// A reliable-connected queue pair.
pub struct RcQp<'c> {
    ctx: &'c Context,
    qp: *mut ibv_qp,
}

impl<'c> RcQp<'c> {
    /// Creates an RC QP on `ctx` with `depth` send and receive entries, in RESET.
    pub fn create(ctx: &'c Context, depth: u32) -> Result<RcQp<'c>> {
        // SAFETY: the init attributes are plain data; the PD and CQ are alive.
        unsafe {
            let mut attr: ibv_qp_init_attr = std::mem::zeroed();
            attr.send_cq = ctx.cq;
            attr.recv_cq = ctx.cq;
            attr.cap = ibv_qp_cap {
                max_send_wr: depth,
                max_recv_wr: depth,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            };
            attr.qp_type = ibv_qp_type::IBV_QPT_RC;
            let qp = ibv_create_qp(ctx.pd, &mut attr);
            if qp.is_null() {
                return fail("ibv_create_qp");
            }
            Ok(RcQp { ctx, qp })
        }
    }

    /// This QP's endpoint, with the GID at `gid_index`.
    pub fn endpoint(&self, gid_index: u8) -> Result<Endpoint> {
        // SAFETY: the QP is alive.
        Ok(Endpoint {
            qpn: unsafe { (*self.qp).qp_num },
            gid: self.ctx.gid(gid_index)?,
        })
    }

    fn modify(
        &self,
        attr: &mut ibv_qp_attr,
        mask: ibv_qp_attr_mask,
        call: &'static str,
    ) -> Result<()> {
        // SAFETY: `attr` is fully initialised for the bits in `mask`.
        let r = unsafe { ibv_modify_qp(self.qp, attr, mask.0 as i32) };
        if r != 0 {
            return fail_code(call, r.abs());
        }
        Ok(())
    }

    /// Moves the QP through INIT, RTR and RTS, connected to `remote` over RoCE v2.
    pub fn connect(&self, remote: Endpoint, gid_index: u8) -> Result<()> {
        // SAFETY: ibv_qp_attr is plain data.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_INIT;
        a.port_num = PORT;
        a.qp_access_flags = (ibv_access_flags::IBV_ACCESS_LOCAL_WRITE
            | ibv_access_flags::IBV_ACCESS_REMOTE_READ
            | ibv_access_flags::IBV_ACCESS_REMOTE_WRITE
            | ibv_access_flags::IBV_ACCESS_REMOTE_ATOMIC)
            .0;
        use ibv_qp_attr_mask as M;
        self.modify(
            &mut a,
            M::IBV_QP_STATE | M::IBV_QP_PKEY_INDEX | M::IBV_QP_PORT | M::IBV_QP_ACCESS_FLAGS,
            "ibv_modify_qp(INIT)",
        )?;

        // SAFETY: as above.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_RTR;
        a.path_mtu = ibv_mtu::IBV_MTU_1024;
        a.dest_qp_num = remote.qpn;
        a.max_dest_rd_atomic = 16;
        a.min_rnr_timer = 12;
        a.ah_attr.is_global = 1;
        a.ah_attr.grh.dgid.raw = remote.gid;
        a.ah_attr.grh.sgid_index = gid_index;
        a.ah_attr.grh.hop_limit = 1;
        a.ah_attr.port_num = PORT;
        self.modify(
            &mut a,
            M::IBV_QP_STATE
                | M::IBV_QP_AV
                | M::IBV_QP_PATH_MTU
                | M::IBV_QP_DEST_QPN
                | M::IBV_QP_RQ_PSN
                | M::IBV_QP_MAX_DEST_RD_ATOMIC
                | M::IBV_QP_MIN_RNR_TIMER,
            "ibv_modify_qp(RTR)",
        )?;

        // SAFETY: as above.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ibv_qp_state::IBV_QPS_RTS;
        a.timeout = 14;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.max_rd_atomic = 16;
        self.modify(
            &mut a,
            M::IBV_QP_STATE
                | M::IBV_QP_TIMEOUT
                | M::IBV_QP_RETRY_CNT
                | M::IBV_QP_RNR_RETRY
                | M::IBV_QP_SQ_PSN
                | M::IBV_QP_MAX_QP_RD_ATOMIC,
            "ibv_modify_qp(RTS)",
        )
    }

    /// Posts one signaled RDMA READ of `len` bytes from `(raddr, rkey)` into `local` at
    /// `offset`.
    pub fn post_read(
        &self,
        wr_id: u64,
        local: &Mr,
        offset: usize,
        len: u32,
        raddr: u64,
        rkey: u32,
    ) -> Result<()> {
        self.post_send(wr_id, local, offset, len, Some((raddr, rkey)))
    }

    /// Posts one signaled SEND of `len` bytes of `local` at `offset`.
    pub fn post_send_msg(&self, wr_id: u64, local: &Mr, offset: usize, len: u32) -> Result<()> {
        self.post_send(wr_id, local, offset, len, None)
    }

    /// Posts a READ from `remote` (address, rkey), or a SEND when `remote` is `None`.
    fn post_send(
        &self,
        wr_id: u64,
        local: &Mr,
        offset: usize,
        len: u32,
        remote: Option<(u64, u32)>,
    ) -> Result<()> {
        let mut sge = local.sge(offset, len);
        // SAFETY: ibv_send_wr is plain data; `sge` and `wr` live across the post, which
        // copies them; the MR outlives the operation (the caller polls before dropping).
        unsafe {
            let mut wr: ibv_send_wr = std::mem::zeroed();
            wr.wr_id = wr_id;
            wr.sg_list = &mut sge;
            wr.num_sge = 1;
            wr.send_flags = ibv_send_flags::IBV_SEND_SIGNALED.0;
            match remote {
                Some((remote_addr, rkey)) => {
                    wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_READ;
                    wr.wr.rdma = rdma_t { remote_addr, rkey };
                }
                None => wr.opcode = ibv_wr_opcode::IBV_WR_SEND,
            }
            let mut bad = ptr::null_mut();
            let r = ibv_post_send(self.qp, &mut wr, &mut bad);
            if r != 0 {
                return fail_code("ibv_post_send", r.abs());
            }
        }
        Ok(())
    }

    /// Posts one receive of up to `len` bytes into `local` at `offset`.
    pub fn post_recv(&self, wr_id: u64, local: &Mr, offset: usize, len: u32) -> Result<()> {
        let mut sge = local.sge(offset, len);
        // SAFETY: as for post_send: plain data, copied by the post; the MR outlives it.
        unsafe {
            let mut wr: ibv_recv_wr = std::mem::zeroed();
            wr.wr_id = wr_id;
            wr.sg_list = &mut sge;
            wr.num_sge = 1;
            let mut bad = ptr::null_mut();
            let r = ibv_post_recv(self.qp, &mut wr, &mut bad);
            if r != 0 {
                return fail_code("ibv_post_recv", r.abs());
            }
        }
        Ok(())
    }
}

impl Drop for RcQp<'_> {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_qp, destroyed once.
        unsafe { ibv_destroy_qp(self.qp) };
    }
}

/// A registered buffer, owned: local write and remote read, write and atomic access.
pub struct Mr<'c> {
    mr: *mut ibv_mr,
    buf: Box<[u8]>,
    _ctx: &'c Context,
}

impl<'c> Mr<'c> {
    /// The scatter entry for `len` bytes at `offset`.
    fn sge(&self, offset: usize, len: u32) -> ibv_sge {
        assert!(
            offset + len as usize <= self.len(),
            "local range outside the MR"
        );
        ibv_sge {
            addr: self.addr() + offset as u64,
            length: len,
            lkey: self.lkey(),
        }
    }

    /// Registers a zeroed buffer of `len` bytes.
    pub fn new(ctx: &'c Context, len: usize) -> Result<Mr<'c>> {
        let mut buf = vec![0u8; len].into_boxed_slice();
        let access = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE
            | ibv_access_flags::IBV_ACCESS_REMOTE_READ
            | ibv_access_flags::IBV_ACCESS_REMOTE_WRITE
            | ibv_access_flags::IBV_ACCESS_REMOTE_ATOMIC;
        // SAFETY: the buffer lives as long as the MR (both owned here, MR dropped first).
        let mr = unsafe { ibv_reg_mr(ctx.pd, buf.as_mut_ptr().cast(), len, access.0 as i32) };
        if mr.is_null() {
            return fail("ibv_reg_mr");
        }
        Ok(Mr { mr, buf, _ctx: ctx })
    }

    /// The buffer.
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// The buffer, writable. Not while an operation on it is in flight.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.buf
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Start address, as verbs sees it.
    pub fn addr(&self) -> u64 {
        self.buf.as_ptr() as u64
    }

    /// Local key.
    pub fn lkey(&self) -> u32 {
        // SAFETY: the MR is alive.
        unsafe { (*self.mr).lkey }
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        // SAFETY: the MR is alive.
        unsafe { (*self.mr).rkey }
    }
}

impl Drop for Mr<'_> {
    fn drop(&mut self) {
        // SAFETY: registered in `new`, deregistered once, before the buffer is freed.
        unsafe { ibv_dereg_mr(self.mr) };
    }
}

/// The loopback check: two RC QPs on `device` connected to each other, an 8-byte RDMA
/// READ from one MR into another, the bytes compared. Returns the bytes read.
pub fn loopback_read(device: &str) -> Result<[u8; 8]> {
    let ctx = Context::open(device, 64)?;
    let a = RcQp::create(&ctx, 16)?;
    let b = RcQp::create(&ctx, 16)?;
    let (ea, eb) = (
        a.endpoint(ROCE_V2_GID_INDEX)?,
        b.endpoint(ROCE_V2_GID_INDEX)?,
    );
    a.connect(eb, ROCE_V2_GID_INDEX)?;
    b.connect(ea, ROCE_V2_GID_INDEX)?;
    let mut src = Mr::new(&ctx, 64)?;
    let dst = Mr::new(&ctx, 64)?;
    let pattern = 0x6b72_636f_7265_2121u64.to_be_bytes(); // "krcore!!"
    src.bytes_mut()[..8].copy_from_slice(&pattern);
    a.post_read(7, &dst, 0, 8, src.addr(), src.rkey())?;
    let done = ctx.poll(1, std::time::Duration::from_secs(10))?;
    if done[0] != (7, 8) {
        return fail_code("completion (unexpected wr_id or length)", libc::EIO);
    }
    let mut got = [0u8; 8];
    got.copy_from_slice(&dst.bytes()[..8]);
    if got != pattern {
        return fail_code("RDMA READ returned different bytes", libc::EIO);
    }
    Ok(got)
}
