//! A fake RDMA NIC implementing the engine's [`Fabric`](krcore_abi::engine::Fabric): send queues with real depths,
//! RC in-order execution, signaled and unsignaled completions, injected failures and
//! flushes. It moves no bytes (the VM tests check data); it checks the engine's
//! promises: never post past a queue's depth, never deregister twice.

use std::collections::{HashSet, VecDeque};

use krcore_abi::engine::{Connection, MrKeys, PostError, SendKind, SendWr, Wc, WcStatus};
use krcore_abi::errno::Errno;
use krcore_abi::sqe::MrAccess;

/// `IB_WC_REM_ACCESS_ERR`, the status an injected failure reports.
pub const WC_REM_ACCESS_ERR: u32 = 10;

/// One fake physical QP.
#[derive(Debug, Default)]
pub struct FakeQp {
    /// Send queue depth.
    pub depth: u32,
    sq: VecDeque<SendWr>,
    /// Posted requests whose completion (own or implied) the NIC has not produced.
    pub outstanding: u32,
    /// Executed unsignaled requests, retired by the next signaled one.
    unsignaled_done: u32,
    /// Whether the QP is in the error state.
    pub failed: bool,
    /// Virtual QPs bound by `connect`.
    pub bound: u32,
}

/// The fake NIC.
#[derive(Debug, Default)]
pub struct FakeNic {
    /// Its QPs, indexed like the engine's physical QPs.
    pub qps: Vec<FakeQp>,
    cq: VecDeque<(u32, Wc)>,
    next_key: u32,
    /// Tokens of registered MRs.
    pub live_mrs: HashSet<u64>,
    /// Fail the next `post_send` after this many requests of its chain.
    pub fail_next_post: Option<usize>,
    /// Fail `connect` with this errno.
    pub fail_connect: Option<Errno>,
    /// Fail `reg_mr` with this errno.
    pub fail_reg: Option<Errno>,
    /// A GID that names another node: CONNECTs to it bind QP 0 as a peer set's QP.
    pub remote: Option<[u8; 16]>,
    /// Whether a CONNECT to `remote` bound QP 0.
    remote_used: bool,
    rr: u32,
    /// Requests posted in all.
    pub posted: u64,
    /// The rkey of every one-sided request posted, in order: what reached the wire.
    pub wire_rkeys: Vec<u32>,
    /// The rkeys of every MR ever registered with a remote right.
    pub remote_rkeys: HashSet<u32>,
    /// The MR (its token) of every message delivery posted, in order.
    pub delivery_mrs: Vec<u64>,
    /// The tokens of every MR ever registered that the NIC may write locally (where a
    /// delivery may land).
    pub writable_mrs: HashSet<u64>,
    /// Keys made for one receive each and not let go yet: key, MR token, address,
    /// length, and whether the key was closed at the NIC.
    pub recv_keys: Vec<(u32, u64, u64, u32)>,
    /// Keys let go, with whether the NIC had closed them.
    pub released_keys: Vec<(u32, bool)>,
    /// Every message written to another node, in order: (address, length, rkey).
    pub far_writes: Vec<(u64, u32, u32)>,
    /// State of the descriptor generator.
    seed: u64,
}

impl FakeNic {
    /// A NIC with QPs of the given send depths.
    pub fn new(depths: &[u32]) -> FakeNic {
        FakeNic {
            qps: depths
                .iter()
                .map(|&depth| FakeQp {
                    depth,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    /// Executes up to `n` send requests of QP `qp`, in order; `fail` fails the first one
    /// (the QP then flushes everything after it).
    pub fn execute(&mut self, qp: u32, n: usize, fail: bool) -> usize {
        let q = &mut self.qps[qp as usize];
        let mut done = 0;
        while done < n {
            let Some(wr) = q.sq.pop_front() else { break };
            let status = if q.failed {
                WcStatus::Flushed
            } else if fail && done == 0 {
                q.failed = true;
                WcStatus::Failed(WC_REM_ACCESS_ERR)
            } else {
                WcStatus::Success
            };
            q.unsignaled_done += 1;
            // Failed and flushed requests always complete; successful ones when signaled.
            if wr.signaled || status != WcStatus::Success {
                q.outstanding -= q.unsignaled_done;
                q.unsignaled_done = 0;
                self.cq.push_back((
                    qp,
                    Wc {
                        wr_id: wr.wr_id,
                        status,
                        byte_len: wr.local.len,
                        imm: None,
                        recv: false,
                        invalidated: None,
                    },
                ));
            }
            done += 1;
        }
        done
    }

    /// Moves QP `qp` to the error state (`ib_modify_qp` to IB_QPS_ERR): everything not
    /// yet executed is flushed by the next [`execute`](Self::execute).
    pub fn set_error(&mut self, qp: u32) {
        self.qps[qp as usize].failed = true;
    }

    /// Resets a failed QP whose send queue was flushed (executed to the end), as the
    /// kernel resets a QP before reusing it. Returns `false` if it still has work.
    pub fn recycle(&mut self, qp: u32) -> bool {
        let q = &mut self.qps[qp as usize];
        if !q.sq.is_empty() {
            return false;
        }
        q.outstanding = 0;
        q.unsignaled_done = 0;
        q.failed = false;
        true
    }

    /// Takes the oldest work completion: (physical QP, completion).
    pub fn poll(&mut self) -> Option<(u32, Wc)> {
        self.cq.pop_front()
    }

    /// Work completions not yet polled.
    pub fn completions_queued(&self) -> usize {
        self.cq.len()
    }

    /// Requests queued on every QP, not yet executed.
    pub fn queued(&self) -> usize {
        self.qps.iter().map(|q| q.sq.len()).sum()
    }
}

impl FakeNic {
    /// Makes a key for `len` bytes at `addr` of MR `mr` alone (a fast registration).
    pub fn map_recv(&mut self, mr: u64, addr: u64, len: u32) -> u32 {
        assert!(
            self.live_mrs.contains(&mr),
            "a key for a live MR, never {mr}"
        );
        self.next_key += 1;
        let key = self.next_key | 0x4000_0000;
        self.recv_keys.push((key, mr, addr, len));
        key
    }

    /// A key [`map_recv`](Self::map_recv) made is let go, exactly once.
    pub fn release_key(&mut self, key: u32, closed: bool) {
        let i = self.recv_keys.iter().position(|k| k.0 == key);
        let i = i.unwrap_or_else(|| panic!("key {key:#x} let go twice or never made"));
        self.recv_keys.swap_remove(i);
        self.released_keys.push((key, closed));
    }

    /// Registers memory, as the kernel does outside its locks (the engine's `register`).
    pub fn reg_mr(&mut self, _addr: u64, _len: u32, access: MrAccess) -> Result<MrKeys, Errno> {
        if let Some(e) = self.fail_reg.take() {
            return Err(e);
        }
        self.next_key += 1;
        let token = self.next_key as u64;
        self.live_mrs.insert(token);
        let rkey = self.next_key | 0x8000_0000;
        let remote = MrAccess::REMOTE_READ | MrAccess::REMOTE_WRITE | MrAccess::REMOTE_ATOMIC;
        if access.bits() & remote.bits() != 0 {
            self.remote_rkeys.insert(rkey);
        }
        if access.contains(MrAccess::LOCAL_WRITE) {
            self.writable_mrs.insert(token);
        }
        Ok(MrKeys {
            lkey: self.next_key,
            rkey,
            token,
        })
    }
}

/// What the engine's [`Fabric`](krcore_abi::engine::Fabric) reaches (see
/// [`node`](crate::node)).
impl FakeNic {
    /// Posts a chain on QP `qp`, checking it fits the QP's depth.
    pub fn post_send(&mut self, qp: u32, wrs: &[SendWr]) -> Result<(), PostError> {
        let fail_at = self.fail_next_post.take();
        let q = &mut self.qps[qp as usize];
        for (i, wr) in wrs.iter().enumerate() {
            if fail_at == Some(i) {
                return Err(PostError {
                    posted: i,
                    errno: Errno::ENOMEM,
                });
            }
            assert!(
                q.outstanding < q.depth,
                "engine posted past the send queue depth {} of QP {qp}",
                q.depth
            );
            q.outstanding += 1;
            q.sq.push_back(*wr);
            self.posted += 1;
            if let SendKind::Read { rkey, .. }
            | SendKind::Write { rkey, .. }
            | SendKind::Cas { rkey, .. }
            | SendKind::Faa { rkey, .. } = wr.kind
            {
                self.wire_rkeys.push(rkey);
            }
            if let SendKind::Deliver { mr, .. } = wr.kind {
                self.delivery_mrs.push(mr);
            }
            if let SendKind::DeliverFar {
                remote_addr, rkey, ..
            } = wr.kind
            {
                self.far_writes.push((remote_addr, wr.local.len, rkey));
            }
        }
        Ok(())
    }

    /// Deregisters an MR, checking it was registered.
    pub fn dereg_mr(&mut self, keys: MrKeys) {
        assert!(
            self.live_mrs.remove(&keys.token),
            "MR {} deregistered twice or never registered",
            keys.token
        );
    }

    /// The remote GID physical QP `qp` connects to, when it is the peer set's.
    pub fn remote_bound(&self, qp: u32) -> Option<[u8; 16]> {
        self.remote.filter(|_| qp == 0 && self.remote_used)
    }

    /// Binds to a QP: `opposite`'s partner, or the next round robin.
    pub fn connect(
        &mut self,
        gid: [u8; 16],
        _service: u32,
        opposite: Option<u32>,
    ) -> Result<Connection, Errno> {
        if let Some(e) = self.fail_connect.take() {
            return Err(e);
        }
        if self.remote == Some(gid) {
            self.remote_used = true;
            self.qps[0].bound += 1;
            return Ok(Connection {
                qp: 0,
                qpn: 100,
                peer: true,
            });
        }
        let n = self.qps.len() as u32;
        // QPs connected in pairs (0-1, 2-3, ...), as the kernel's pool is.
        let qp = match opposite {
            Some(o) if (o ^ 1) < n => o ^ 1,
            _ => {
                self.rr += 1;
                (self.rr - 1) % n
            }
        };
        // With a remote GID, QP 0 is the peer set's: this node's own CONNECTs take the
        // pair after it.
        let qp = match (self.remote, qp) {
            (Some(_), 0) if n > 2 => 2,
            _ => qp,
        };
        self.qps[qp as usize].bound += 1;
        Ok(Connection {
            qp,
            qpn: 100 + qp,
            peer: false,
        })
    }

    /// Binds to QP `qp` for a peer's end a listen takes: only the peer set's QP (0) to
    /// the remote GID.
    pub fn accept(&mut self, gid: [u8; 16], qp: u32) -> Result<Connection, Errno> {
        if self.remote != Some(gid) || qp != 0 {
            return Err(Errno::EHOSTUNREACH);
        }
        self.remote_used = true;
        self.qps[0].bound += 1;
        Ok(Connection {
            qp: 0,
            qpn: 100,
            peer: true,
        })
    }

    /// Releases a binding.
    pub fn disconnect(&mut self, qp: u32) {
        let q = &mut self.qps[qp as usize];
        assert!(q.bound > 0, "disconnect without connect on QP {qp}");
        q.bound -= 1;
    }

    /// A descriptor, from a deterministic generator.
    pub fn descriptor(&mut self) -> u64 {
        // Deterministic for reproducible tests (xorshift); the kernel draws from its CSPRNG.
        let mut x = if self.seed == 0 {
            0x9e37_79b9_7f4a_7c15
        } else {
            self.seed
        };
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.seed = x;
        x
    }
}
