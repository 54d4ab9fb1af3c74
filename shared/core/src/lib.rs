//! baton's core: the domain, the ports it needs from the world, and the use cases that the Lambda
//! functions, `baton local`, the CLI and the simulation all run. No AWS SDK and no Lambda runtime
//! is linked here; the adapters are `baton-aws` (DynamoDB, Step Functions, SQS) and
//! `baton-secrets-manager`, and the Lambda serving code is `baton-lambda` (docs/ARCHITECTURE.md).
//!
//! The dependency rule, checked by `tests/tests/function_deps.rs`:
//! - [`domain`] is pure: no I/O, the clock always comes in as an argument, and it imports neither
//!   a port nor a use case. Handlers parse at the edge ([`domain::event`], [`domain::config`],
//!   [`domain::ids`]), ask [`domain::lifecycle::decide`] what to do, then carry the decision out.
//! - [`ports`] are the traits the use cases call (and the in-memory store, the port's model held
//!   to the same contract as DynamoDB). A port imports the domain, never a use case.
//! - [`use_cases`] carry decisions out with conditional writes through the ports.

pub mod catalog;
pub mod domain;
pub mod json_len;
pub mod limits;
pub mod mutants;
pub mod ports;
pub mod use_cases;

/// Whether baton checks its own decisions as it makes them (each write against the record's
/// and the wait's tables, each failure text against Step Functions' limits), panicking on one
/// that breaks them: in debug builds, and in the simulation's optimized build (feature
/// `checks`), whose every schedule runs them; never in a deployed release build.
pub const CHECKED: bool = cfg!(any(debug_assertions, feature = "checks"));
