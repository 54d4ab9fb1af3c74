//! The ports: what the use cases need from the world (a store, a workflow engine, queues, a
//! secret, a metrics sink), as traits. Adapters implement them: `baton-aws` on AWS, the
//! simulation on its model, and [`store::memory`] in memory. A port imports the domain, never a
//! use case.

pub mod dead_letters;
pub mod metrics;
pub mod orchestrator;
pub mod outbound;
pub mod secrets;
pub mod store;
