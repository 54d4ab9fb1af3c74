//! The use cases: what each function does with an input, through the ports. [`engine`] holds
//! what they share (the read-decide-write loop over a record); [`batch`] is the SQS batch
//! protocol intake and progress run under.

pub mod batch;
pub mod callback;
pub mod ending;
pub mod engine;
pub mod intake;
pub mod progress;
pub mod replay;
pub mod rollout;
pub mod sweeper;
