// SPDX-License-Identifier: GPL-2.0
//! cm.c's connection requests and answers, read and written by abi's `cluster::hello`:
//! the bytes a host on the segment sends the listener are parsed here, in Rust, and cm.c
//! sees only fields. Each function is a leaf: no lock, no allocation, callable from
//! rdma_cm's handlers.

use core::ffi::c_int;

use crate::abi::cluster::auth::{NONCE_LEN, TAG_LEN};
use crate::abi::cluster::hello::{
    fresh_nonce, Accept, Endpoint, Hello, Kind, Offer, Proof, Refusal, Role, Step, Transcript,
    ACCEPT_LEN, ASK, CHALLENGE_LEN, FRESH, HELLO_LEN, PROVE, TRANSCRIPT_LEN, YIELD_LEN,
};
use crate::abi::errno::Errno;
use crate::shim::{layout, MetaOffer};

/// `struct krcore_cm_hello` (shim.h): a hello's fields.
#[repr(C)]
pub(crate) struct CmHello {
    kind: u8,
    index: u8,
    /// `KRCORE_CM_ASK` (1), `KRCORE_CM_PROVE` (2) or `KRCORE_CM_FRESH` (3).
    step: u8,
    resv: u8,
    nonce_i: [u8; NONCE_LEN],
    nonce_r: [u8; NONCE_LEN],
    tag: [u8; TAG_LEN],
}

/// `struct krcore_cm_bind` (shim.h): what a tag binds. Addresses and ports as rdma_cm
/// holds them (network order).
#[repr(C)]
pub(crate) struct CmBind {
    kind: u8,
    index: u8,
    initiator_port: u16,
    responder_port: u16,
    /// The hello's step (`KRCORE_CM_PROVE` or `KRCORE_CM_FRESH`).
    step: u8,
    resv: u8,
    initiator: u32,
    responder: u32,
    initiator_qpn: u32,
    responder_qpn: u32,
    nonce_i: [u8; NONCE_LEN],
    nonce_r: [u8; NONCE_LEN],
}

layout!(CmHello, 52; kind 0, index 1, step 2, resv 3, nonce_i 4, nonce_r 20, tag 36);
layout!(
    CmBind, 56;
    kind 0, index 1, initiator_port 2, responder_port 4, step 6, resv 7, initiator 8,
    responder 12, initiator_qpn 16, responder_qpn 20, nonce_i 24, nonce_r 40,
);
const _: () = assert!(HELLO_LEN == 56 && CHALLENGE_LEN == 20 && YIELD_LEN == 20);
const _: () = assert!(ACCEPT_LEN == 40 && TRANSCRIPT_LEN == 64);
// shim.h's KRCORE_CM_ASK, KRCORE_CM_PROVE and KRCORE_CM_FRESH.
const _: () = assert!(ASK == 1 && PROVE == 2 && FRESH == 3);

/// A kind cm.c names (`KRCORE_CM_PEER` or `KRCORE_CM_META`; its own, never a peer's).
fn kind_of(k: u8) -> Kind {
    if k == Kind::Meta as u8 {
        Kind::Meta
    } else {
        Kind::Peer
    }
}

/// The bytes at `data`, `len` of them (none when null).
///
/// # Safety
/// `data` is null or points at `len` readable bytes that stay put for `'a`.
unsafe fn bytes<'a>(data: *const u8, len: u32) -> &'a [u8] {
    if data.is_null() {
        return &[];
    }
    // SAFETY: the caller's promise.
    unsafe { core::slice::from_raw_parts(data, len as usize) }
}

/// Reads a connection request's private data (`len` bytes at `data`) into `out`: 0, or
/// `-EPROTO` when it is not a hello.
#[no_mangle]
extern "C" fn krcore_rs_cm_hello_read(data: *const u8, len: u32, out: *mut CmHello) -> c_int {
    // SAFETY: rdma_cm's private data, `len` bytes, for the handler's length.
    let Some(h) = Hello::read(unsafe { bytes(data, len) }) else {
        return Errno::EPROTO.to_neg();
    };
    let p = h.step.proof().copied().unwrap_or(Proof {
        nonce_r: [0; NONCE_LEN],
        tag: [0; TAG_LEN],
    });
    // SAFETY: the caller passes a writable struct.
    unsafe {
        out.write(CmHello {
            kind: h.kind as u8,
            index: h.index,
            step: h.step.byte(),
            resv: 0,
            nonce_i: h.nonce_i,
            nonce_r: p.nonce_r,
            tag: p.tag,
        })
    };
    0
}

/// Writes `h`'s wire form, `KRCORE_CM_HELLO_LEN` bytes, at `out`.
#[no_mangle]
extern "C" fn krcore_rs_cm_hello_write(h: *const CmHello, out: *mut u8) {
    // SAFETY: the caller passes a struct of its own making.
    let h = unsafe { &*h };
    let proof = Proof {
        nonce_r: h.nonce_r,
        tag: h.tag,
    };
    let step = match h.step {
        PROVE => Step::Prove(proof),
        FRESH => Step::Fresh(proof),
        _ => Step::Ask,
    };
    let hello = Hello {
        kind: kind_of(h.kind),
        index: h.index,
        nonce_i: h.nonce_i,
        step,
    };
    // SAFETY: `out` has room for HELLO_LEN bytes.
    unsafe { out.cast::<[u8; HELLO_LEN]>().write(hello.write()) };
}

/// Reads a refusal's private data: 1 for a challenge (its nonce written at `out`), 2
/// for a yield (its tag written at `out`, for the caller to check), 0 for anything else.
#[no_mangle]
extern "C" fn krcore_rs_cm_refusal_read(data: *const u8, len: u32, out: *mut u8) -> c_int {
    const _: () = assert!(NONCE_LEN == TAG_LEN);
    // SAFETY: rdma_cm's private data, `len` bytes.
    match Refusal::read(unsafe { bytes(data, len) }) {
        Refusal::Challenge(n) => {
            // SAFETY: `out` has room for NONCE_LEN bytes.
            unsafe { out.cast::<[u8; NONCE_LEN]>().write(n) };
            1
        }
        Refusal::Yield(t) => {
            // SAFETY: `out` has room for TAG_LEN (NONCE_LEN) bytes.
            unsafe { out.cast::<[u8; TAG_LEN]>().write(t) };
            2
        }
        Refusal::Refused => 0,
    }
}

/// Writes a challenge of `nonce_r`, `KRCORE_CM_CHALLENGE_LEN` bytes, at `out`.
#[no_mangle]
extern "C" fn krcore_rs_cm_challenge_write(nonce_r: *const u8, out: *mut u8) {
    // SAFETY: `nonce_r` points at NONCE_LEN bytes; `out` has room for CHALLENGE_LEN.
    unsafe {
        let n = &*nonce_r.cast::<[u8; NONCE_LEN]>();
        out.cast::<[u8; CHALLENGE_LEN]>().write(Refusal::challenge(n));
    }
}

/// Writes a yield carrying the listener's `tag` (`KRCORE_CM_TAG_LEN` bytes),
/// `KRCORE_CM_YIELD_LEN` bytes, at `out`.
#[no_mangle]
extern "C" fn krcore_rs_cm_yield_write(tag: *const u8, out: *mut u8) {
    // SAFETY: `tag` points at TAG_LEN bytes; `out` has room for YIELD_LEN bytes.
    unsafe {
        let t = &*tag.cast::<[u8; TAG_LEN]>();
        out.cast::<[u8; YIELD_LEN]>().write(Refusal::yielding(t));
    }
}

/// Reads an accept's private data into `offer` (its `ready` set) and `tag`: 0, or
/// `-EPROTO` when it is not one.
#[no_mangle]
extern "C" fn krcore_rs_cm_accept_read(
    data: *const u8,
    len: u32,
    offer: *mut MetaOffer,
    tag: *mut u8,
) -> c_int {
    // SAFETY: rdma_cm's private data, `len` bytes.
    let Some(a) = Accept::read(unsafe { bytes(data, len) }) else {
        return Errno::EPROTO.to_neg();
    };
    // SAFETY: the caller passes a writable offer and TAG_LEN writable bytes.
    unsafe {
        offer.write(MetaOffer {
            base: a.offer.base,
            rkey: a.offer.rkey,
            node_slots: a.offer.node_slots,
            export_slots: a.offer.export_slots,
            ready: 1,
            resv: [0; 3],
        });
        tag.cast::<[u8; TAG_LEN]>().write(a.tag);
    }
    0
}

/// Writes an accept of `offer` (null: none) and `tag`, `KRCORE_CM_ACCEPT_LEN` bytes, at
/// `out`.
#[no_mangle]
extern "C" fn krcore_rs_cm_accept_write(offer: *const MetaOffer, tag: *const u8, out: *mut u8) {
    // SAFETY: `offer` is null or readable; `tag` points at TAG_LEN bytes; `out` has room
    // for ACCEPT_LEN bytes.
    unsafe {
        let offer = offer.as_ref().map_or(Offer::default(), |o| Offer {
            base: o.base,
            rkey: o.rkey,
            node_slots: o.node_slots,
            export_slots: o.export_slots,
        });
        let tag = *tag.cast::<[u8; TAG_LEN]>();
        out.cast::<[u8; ACCEPT_LEN]>().write(Accept { offer, tag }.write());
    }
}

/// Writes the transcript `b` binds, for the dialer's tag (`initiator`) or the accept's,
/// `KRCORE_CM_TRANSCRIPT_LEN` bytes, at `out`.
#[no_mangle]
extern "C" fn krcore_rs_cm_transcript(role: c_int, b: *const CmBind, out: *mut u8) {
    // SAFETY: the caller passes a bind of its own making.
    let b = unsafe { &*b };
    let t = Transcript {
        kind: kind_of(b.kind),
        step: b.step,
        index: b.index,
        // Network order as held: the bytes in memory are the wire's.
        initiator: Endpoint {
            addr: b.initiator.to_ne_bytes(),
            port: u16::from_be(b.initiator_port),
        },
        responder: Endpoint {
            addr: b.responder.to_ne_bytes(),
            port: u16::from_be(b.responder_port),
        },
        initiator_qpn: b.initiator_qpn,
        responder_qpn: b.responder_qpn,
        nonce_i: b.nonce_i,
        nonce_r: b.nonce_r,
    };
    // shim.h's enum krcore_cm_role.
    let role = match role {
        0 => Role::Initiator,
        1 => Role::Responder,
        2 => Role::Yielder,
        3 => Role::ByeInitiator,
        _ => Role::ByeResponder,
    };
    // SAFETY: `out` has room for TRANSCRIPT_LEN bytes.
    unsafe { out.cast::<[u8; TRANSCRIPT_LEN]>().write(t.bytes(role)) };
}

/// Writes what a FRESH hello made at `at_ms` (the wall clock) carries in place of the
/// listener's nonce, `NONCE_LEN` bytes, at `out`.
#[no_mangle]
extern "C" fn krcore_rs_cm_fresh_nonce(at_ms: i64, out: *mut u8) {
    // SAFETY: `out` has room for NONCE_LEN bytes.
    unsafe { out.cast::<[u8; NONCE_LEN]>().write(fresh_nonce(at_ms.max(0) as u64)) };
}
