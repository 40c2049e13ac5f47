//! The engine under the kernel's locks ([`device`](crate::device)): rings sharing a
//! physical QP, rings on different QPs, routing against enters and a ring's close,
//! messages on links in different shards, a listen's offers against enters.

use krcore_abi::cluster::notice::{Notice, NO_LINK};
use krcore_abi::cqe::{CqeFlags, Reason};
use krcore_abi::engine::{port_key, shard_of};
use loom::thread;

use crate::device::{Device, Faults};
use crate::{fails_in_child, model};

/// Two rings share one physical QP of depth 2. Each ring's owner enters (submitting
/// under its ring's lock, posting in the QP's section) while a CQ event routes, and each
/// application reaps its CQ without a lock. Each gets exactly its own completion, and
/// the QP's credits and the busy hint come back to rest.
fn shared_qp_model(faults: Faults) {
    model(move || {
        let (dev, mut apps) = Device::new(&[2], 2, faults);
        for (r, app) in apps.iter_mut().enumerate() {
            app.read((r as u64 + 1) * 100);
        }
        let kernel: Vec<_> = (0..2)
            .map(|r| {
                let dev = dev.clone();
                thread::spawn(move || dev.enter(r))
            })
            .collect();
        let event = {
            let dev = dev.clone();
            thread::spawn(move || dev.route())
        };
        // Each application reaps concurrently with the kernel threads.
        let mut got: Vec<Vec<u64>> = apps.iter_mut().map(|a| a.reap()).collect();
        for k in kernel {
            k.join().unwrap();
        }
        event.join().unwrap();
        for (r, app) in apps.iter_mut().enumerate() {
            got[r].extend(app.reap());
            assert_eq!(got[r], vec![(r as u64 + 1) * 100], "ring {r}");
        }
        assert_eq!(dev.outstanding(0), 0, "credits leaked");
        assert!(!dev.hinted(), "busy hint left up on a quiet QP");
    });
}

#[test]
fn shared_qp_concurrent_completions() {
    shared_qp_model(Faults::default());
}

#[test]
#[should_panic]
fn weakened_shared_qp_concurrent_completions() {
    shared_qp_model(Faults {
        weak_cq: true,
        ..Faults::default()
    });
}

/// Rings on different physical QPs do not wait for each other. Ring 0's owner enters
/// and completes its READ while another thread sits in QP 1's section (as ring 1's
/// posting would); then both rings enter at once while a CQ event routes. Each gets its
/// own completions, in order, and both QPs come back to rest. With one device-wide lock
/// behind every QP's the first part deadlocks.
fn different_qps_model(faults: Faults) {
    model(move || {
        let (dev, mut apps) = Device::new(&[2, 2], 2, faults);
        apps[0].read(100);
        let ring0 = {
            let dev = dev.clone();
            thread::spawn(move || dev.enter(0))
        };
        dev.in_qp_section(1, || ring0.join().unwrap());
        assert_eq!(
            apps[0].reap(),
            vec![100],
            "ring 0 finished while QP 1 was busy"
        );

        apps[0].read(101);
        apps[1].read(200);
        let kernel: Vec<_> = (0..2)
            .map(|r| {
                let dev = dev.clone();
                thread::spawn(move || dev.enter(r))
            })
            .collect();
        dev.route();
        for k in kernel {
            k.join().unwrap();
        }
        assert_eq!(apps[0].reap(), vec![101]);
        assert_eq!(apps[1].reap(), vec![200]);
        two_qps_at_rest(&dev);
    });
}

/// Both QPs of a two-QP device came back to rest: no credit held, the hint down.
fn two_qps_at_rest(dev: &Device) {
    assert_eq!(
        (dev.outstanding(0), dev.outstanding(1)),
        (0, 0),
        "credits leaked"
    );
    assert!(!dev.hinted(), "busy hint left up on quiet QPs");
}

#[test]
fn rings_on_different_qps_progress_at_once() {
    different_qps_model(Faults::default());
}

#[test]
fn weakened_rings_on_different_qps_behind_a_device_lock() {
    fails_in_child("engine::twin_device_lock", "deadlock");
}

#[test]
#[ignore = "run by its weakened_ test, in a child process"]
fn twin_device_lock() {
    different_qps_model(Faults {
        device_wide: true,
        ..Faults::default()
    });
}

/// Routing runs while ring 1's owner enters (posting on the QP the router is completing
/// on) and ring 0's file closes with a READ in flight. Ring 1 gets both its completions
/// in order; ring 0 gets its CQE only if it completed before the close, and is released
/// once idle (its MR deregistered, ring 1's kept); credits and the hint come to rest.
/// A router that completed into a ring under the ring's lock from inside the QP's
/// section, instead of through the ring's inbox, deadlocks against the enter.
fn route_enter_close_model(faults: Faults) {
    model(move || {
        let (dev, mut apps) = Device::new(&[4], 2, faults);
        apps[0].read(50);
        dev.submit(0);
        apps[1].read(60);
        dev.submit(1);
        apps[1].read(61);
        let closer = {
            let dev = dev.clone();
            thread::spawn(move || dev.close(0))
        };
        let owner = {
            let dev = dev.clone();
            thread::spawn(move || dev.enter(1))
        };
        dev.route();
        closer.join().unwrap();
        owner.join().unwrap();
        // The owner's next enter, or the next CQ event: routes what is left.
        dev.route();
        assert_eq!(apps[1].reap(), vec![60, 61]);
        let got0 = apps[0].reap();
        assert!(got0.is_empty() || got0 == vec![50], "ring 0 got {got0:?}");
        assert!(dev.released(0), "closed ring not released once idle");
        assert_eq!(dev.outstanding(0), 0, "credits leaked");
        assert!(!dev.hinted(), "busy hint left up on a quiet QP");
        assert_eq!(dev.live_mrs(), 1, "ring 0's MR deregistered, ring 1's kept");
    });
}

#[test]
fn routing_against_enter_and_close() {
    route_enter_close_model(Faults::default());
}

#[test]
fn weakened_routing_completes_under_the_qp_lock() {
    fails_in_child("engine::twin_deliver_under_qp", "deadlock");
}

#[test]
#[ignore = "run by its weakened_ test, in a child process"]
fn twin_deliver_under_qp() {
    route_enter_close_model(Faults {
        deliver_under_qp: true,
        ..Faults::default()
    });
}

/// Two services whose links are in different shards.
fn services_in_two_shards() -> (u32, u32) {
    let shard = |s: u32| shard_of(&[0; 16], port_key(s as u16, s as u16), 2);
    (1, (2..).find(|&s| shard(s) != shard(1)).unwrap())
}

/// Messages on links in different shards do not wait for each other. Rings 0 and 1 are
/// one link, rings 2 and 3 another, in the other shard. Ring 1 posts a receive and
/// ring 0 sends into it, entering on another thread while this thread sits in the
/// other link's shard section; then, receives posted, both links' sends enter at once,
/// each on its own thread. Every ring gets exactly its own completions, and the QPs
/// come back to rest. With every
/// shard behind one device-wide lock the first part deadlocks.
fn different_shards_model(faults: Faults) {
    model(move || {
        let (a, b) = services_in_two_shards();
        let (dev, mut apps) = Device::with_services(&[2, 2], &[a, a, b, b], faults);
        apps[1].recv(10);
        dev.enter(1);
        apps[0].send(11);
        let link_a = {
            let dev = dev.clone();
            thread::spawn(move || dev.enter(0))
        };
        let other = shard_of(&[0; 16], port_key(b as u16, b as u16), 2);
        dev.in_shard_section(other, || link_a.join().unwrap());
        assert_eq!(
            apps[0].reap(),
            vec![11],
            "the send, while the other shard was held"
        );
        dev.route();
        assert_eq!(apps[1].reap(), vec![10]);

        // The receives wait; both sends go at once.
        apps[1].recv(20);
        apps[3].recv(40);
        dev.enter(1);
        dev.enter(3);
        apps[0].send(21);
        apps[2].send(41);
        let link_b = {
            let dev = dev.clone();
            thread::spawn(move || dev.enter(2))
        };
        dev.enter(0);
        link_b.join().unwrap();
        dev.route();
        let got: Vec<_> = apps.iter_mut().map(|a| a.reap()).collect();
        assert_eq!(got, vec![vec![21], vec![20], vec![41], vec![40]]);
        two_qps_at_rest(&dev);
    });
}

#[test]
fn messages_on_different_shards_progress_at_once() {
    different_shards_model(Faults::default());
}

#[test]
fn weakened_messages_behind_a_device_lock() {
    fails_in_child("engine::twin_links_device_lock", "deadlock");
}

#[test]
#[ignore = "run by its weakened_ test, in a child process"]
fn twin_links_device_lock() {
    different_shards_model(Faults {
        links_device_wide: true,
        ..Faults::default()
    });
}

/// The peer node of the listening model.
const PEER: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 12];

/// A Hello for the listen on port 9 from the peer's end `from`, on a port of its own.
fn hello(from: u64) -> Notice {
    Notice::Hello {
        to_port: 9,
        from_port: 40000 + from as u16,
        from,
        to: NO_LINK,
        pair: false,
    }
}

/// A ring listens on a service (engine's `listen`) and is driven by routing alone, as
/// an eventfd-driven application's is. A peer's Hello arrives (under the CQ's lock,
/// its shard's, then routed) while the ring's owner enters: whichever comes first, the
/// ring gets the peer's virtual QP in one ACCEPT CQE, with no further enter. Then a
/// second peer's Hello races an UNLISTEN: the listen's last CQE comes once, after any
/// ACCEPT (here a refusal: the ring has no virtual QP slot left), and the NIC's
/// bindings match the virtual QPs given. A router that left offers to the
/// ring's next submission loses the race in which the owner entered first.
fn listen_model(faults: Faults) {
    model(move || {
        let (dev, mut apps) = Device::with_services(&[2, 2, 2, 2], &[1], faults);
        dev.set_peer(PEER);
        apps[0].listen(7, 9, true);
        dev.enter(0);
        let c = apps[0].reap_cqes();
        assert!(c.len() == 1 && c[0].res == 0, "listening: {c:?}");
        let before = dev.bound(0);

        let arrives = {
            let dev = dev.clone();
            thread::spawn(move || dev.notice(PEER, 0, hello(0x11)))
        };
        let owner = {
            let dev = dev.clone();
            thread::spawn(move || dev.enter(0))
        };
        arrives.join().unwrap();
        owner.join().unwrap();
        dev.route();
        let c = apps[0].reap_cqes();
        let accept = (CqeFlags::MORE | CqeFlags::ACCEPT).bits();
        assert!(
            c.len() == 1 && c[0].user_data == 7 && c[0].res >= 0 && c[0].flags == accept,
            "the peer's virtual QP, by routing alone: {c:?}"
        );
        assert_eq!(dev.bound(0), before + 1);

        apps[0].listen(8, 9, false);
        let arrives = {
            let dev = dev.clone();
            thread::spawn(move || dev.notice(PEER, 0, hello(0x22)))
        };
        dev.enter(0);
        arrives.join().unwrap();
        dev.route();
        let c = apps[0].reap_cqes();
        let last = c
            .iter()
            .position(|c| c.user_data == 7 && c.flags & accept == 0);
        let last = last.expect("the listen's last CQE");
        assert_eq!(c[last].failure(), Some(Reason::Cancelled), "{c:?}");
        // The ring's two virtual QP slots are both used: an ACCEPT now is a refusal
        // (TableFull), which binds nothing.
        let accepted = c.iter().filter(|c| c.flags == accept && c.res >= 0).count();
        assert!(
            c[last + 1..].iter().all(|c| c.user_data == 8 && c.res == 0),
            "nothing of the listen after its last CQE: {c:?}"
        );
        assert_eq!(dev.bound(0), before + 1 + accepted as u32);
    });
}

#[test]
fn a_listen_takes_offers_by_routing_alone() {
    listen_model(Faults::default());
}

#[test]
#[should_panic]
fn weakened_offers_taken_at_enter_only() {
    listen_model(Faults {
        offers_at_enter_only: true,
        ..Faults::default()
    });
}
