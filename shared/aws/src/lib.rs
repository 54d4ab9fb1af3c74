//! baton's AWS adapters: the ports of `baton-core` on DynamoDB ([`dynamodb`]), Step Functions
//! ([`stepfunctions`]) and SQS ([`sqs`]), the SDK configuration and error classification every
//! adapter shares ([`sdk`]), and the wiring every process starts from ([`wiring`]: settings,
//! logs, the engine over these adapters). Secrets Manager is `baton-secrets-manager`, linked only
//! by what verifies callbacks.

pub mod dynamodb;
pub mod sdk;
pub mod sqs;
pub mod stepfunctions;
pub mod wiring;
