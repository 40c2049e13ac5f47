//! Shared pieces of krcore's benchmarks: the figure record the guest prints and the
//! host turns into tables and plots.

pub mod record;
