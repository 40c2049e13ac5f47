//! A device's physical QPs, counted in one place: the pool's, the peer sets', and the
//! bound every per-QP bit set ([`QpBits`](super::QpBits)) is sized by.
//!
//! Slots are numbered pool first (`0..POOL_QPS`), then each peer set's
//! `QPS_PER_SET` in turn, up to `QPS`, which never passes `MAX_QPS`.

/// Physical QPs a device may have: the size of every [`QpBits`](super::QpBits).
pub const MAX_QPS: usize = 256;

/// QPs in the pool: pairs (each QP of a pair connected to the other), so an even
/// number.
pub const POOL_QPS: usize = 4;
const _: () = assert!(POOL_QPS % 2 == 0 && POOL_QPS <= 64);

/// QPs in a connection set to a peer kernel.
pub const QPS_PER_SET: usize = 2;

/// Peer nodes a device can keep sets to at once, at most (a module parameter says how
/// many it does): what the bit sets leave after the pool.
pub const PEER_SETS_MAX: usize = (MAX_QPS - POOL_QPS) / QPS_PER_SET;

/// Physical QP slots of the sets, after the pool's.
pub const PEER_QPS: usize = PEER_SETS_MAX * QPS_PER_SET;

/// Physical QP slots of a device: the pool's, then the peer sets'.
pub const QPS: usize = POOL_QPS + PEER_QPS;
const _: () = assert!(
    QPS <= MAX_QPS,
    "the recovery keeps a bit per QP in a QpBits"
);
