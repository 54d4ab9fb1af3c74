//! Which function makes a call, as the emulator sees it: the policy contract's evidence.
//!
//! On AWS every call a function makes is authorized against its own role. moto enforces no IAM,
//! so locally each function's clients tag every request with the function's logical id and the
//! stack (`x-baton-function`, `x-baton-stack`). `tools/emulator.py --record-calls` writes down
//! each tagged call with the action and the resource ARN it touches, and `tools/policy-check.py`
//! evaluates them against the roles of the SAM-transformed template: a call AWS would deny fails
//! `make test`, naming the function, the action and the ARN.
//!
//! The stack's resolved names and ARNs go to the emulator too (`POST /_baton/stacks`), so the
//! check can resolve the template's intrinsics exactly as this stack was provisioned. Against a
//! plain moto_server (no such route) that is skipped.

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextMut;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;

/// The header naming the calling function's logical id.
pub const FUNCTION_HEADER: &str = "x-baton-function";
/// The header naming the calling function's stack.
pub const STACK_HEADER: &str = "x-baton-stack";

/// Tags every request with the function and stack making it.
#[derive(Debug, Clone)]
pub struct CallerIdentity {
    pub function: String,
    pub stack: String,
}

impl Intercept for CallerIdentity {
    fn name(&self) -> &'static str {
        "baton-caller-identity"
    }

    fn modify_before_transmit(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let headers = context.request_mut().headers_mut();
        headers.insert(FUNCTION_HEADER, self.function.clone());
        headers.insert(STACK_HEADER, self.stack.clone());
        Ok(())
    }
}
