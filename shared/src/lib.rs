//! baton's shared library: the pure domain every handler uses, and (later) its AWS adapters.
//!
//! The domain is pure: no I/O, and the clock always comes in as an argument. Handlers parse at the
//! edge ([`event`], [`config`], [`ids`]), ask [`lifecycle::decide`] what to do, then carry the
//! decision out with conditional writes.

pub mod asl;
pub mod config;
pub mod error;
pub mod event;
pub mod ids;
pub mod lifecycle;
pub mod orchestrator;
pub mod pattern;
pub mod store;
