//! Shared helpers for krcore benchmarks.
