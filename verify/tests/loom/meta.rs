//! The MetaServer client's hand-off between a submission and the network work (kmod's
//! meta.rs): a ring's request leaves a job and then marks work due; whoever runs the
//! network work clears the mark and then takes every job. No job may be left waiting
//! with the mark clear: nobody would run it (the asker's next network step finds
//! nothing due and sleeps, and so does everyone's).

use loom::sync::atomic::AtomicBool;
use loom::sync::{Arc, Mutex};
use loom::thread;

use core::sync::atomic::Ordering;
use krcore_abi::engine::VecStore;
use krcore_abi::meta::cache::MetaCache;
use krcore_abi::meta::client::{run, Answer, MetaClient};
use krcore_abi::meta::lookup::{EXPORT_FRAME, PROBE};
use krcore_abi::meta::record::name;
use krcore_abi::meta::serve::mem::Served;
use krcore_abi::meta::tables::{mem::MemRegion, Tables};

use crate::model;

const T: Tables = Tables {
    node_slots: 4,
    export_slots: 8,
    key: [7, 11],
};

struct Meta {
    client: Mutex<MetaClient<VecStore>>,
    region: Mutex<MemRegion>,
    due: AtomicBool,
}

impl Meta {
    /// kmod's `MetaNet::work`: clear the mark, then run every job.
    fn work(&self) {
        if !self.due.swap(false, Ordering::AcqRel) {
            return;
        }
        let mut window = vec![0u8; PROBE * EXPORT_FRAME];
        loop {
            let Some(job) = self.client.lock().unwrap().take_job() else {
                break;
            };
            let mut region = self.region.lock().unwrap();
            let mut served = Served {
                region: &mut region,
                tables: T,
                from: [192, 0, 2, 1],
            };
            let outcome = run(&job, &mut served, &T, &mut window);
            drop(region);
            self.client.lock().unwrap().finish(job, outcome);
        }
    }
}

/// Two rings ask for lookups at once, each then doing the network work as kmod's
/// submitting process does. `mark_first`: the twin marks work due before leaving its
/// job.
fn handoff_model(mark_first: bool) {
    model(move || {
        let meta = Arc::new(Meta {
            client: Mutex::new(MetaClient::new(
                MetaCache::new(vec![None; 4], vec![(0, 0); 2]),
                vec![None; 2],
                vec![None; 4],
            )),
            region: Mutex::new(MemRegion::new(T.bytes())),
            due: AtomicBool::new(false),
        });
        let ask = |meta: Arc<Meta>, n: &'static str| {
            thread::spawn(move || {
                let n = name(n).unwrap();
                if mark_first {
                    meta.due.store(true, Ordering::Release);
                }
                let a = meta.client.lock().unwrap().import(&n, Some(1), n[0] as u32);
                if a == Answer::Pending && !mark_first {
                    meta.due.store(true, Ordering::Release);
                }
                meta.work();
            })
        };
        let (a, b) = (ask(meta.clone(), "a"), ask(meta.clone(), "b"));
        a.join().unwrap();
        b.join().unwrap();
        // Every job has run, or work is still marked due (the next step runs it).
        let waiting = meta.client.lock().unwrap().due();
        assert!(
            !waiting || meta.due.load(Ordering::Acquire),
            "a job waits and nothing is due: it would never run"
        );
    });
}

#[test]
fn meta_jobs_are_never_left_unmarked() {
    handoff_model(false);
}

#[test]
#[should_panic(expected = "it would never run")]
fn weakened_meta_mark_before_the_job() {
    handoff_model(true);
}
