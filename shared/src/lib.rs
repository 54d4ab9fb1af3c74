//! baton's shared library: the pure domain every handler uses, its AWS adapters, and the use
//! cases (intake, progress, ...) that the Lambda functions and the local runtime both call.
//!
//! The domain is pure: no I/O, and the clock always comes in as an argument. Handlers parse at the
//! edge ([`event`], [`config`], [`ids`]), ask [`lifecycle::decide`] what to do, then carry the
//! decision out with conditional writes.

pub mod asl;
pub mod callback;
pub mod catalog;
pub mod config;
pub mod engine;
pub mod error;
pub mod event;
pub mod ids;
pub mod intake;
pub mod lifecycle;
pub mod metrics;
pub mod mutants;
pub mod orchestrator;
pub mod outbound;
pub mod pattern;
pub mod progress;
pub mod replay;
pub mod rollout;
pub mod runtime;
pub mod secrets;
pub mod sqs;
pub mod store;
pub mod sweeper;
pub mod webhook;
