//! Shared pieces of krcore's benchmarks: the figure record the guest prints, and the
//! host's report of a run (markdown tables, goals, SVG plots).

pub mod demo;
pub mod figures;
pub mod native;
pub mod plot;
pub mod record;
pub mod report;
