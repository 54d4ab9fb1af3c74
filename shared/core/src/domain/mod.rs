//! The domain: what a workflow is and how its record moves. Pure: no I/O, no clock of its own,
//! and no import of a port or a use case.

pub mod asl;
pub mod config;
pub mod error;
pub mod event;
pub mod ids;
pub mod lifecycle;
pub mod pattern;
pub mod webhook;
