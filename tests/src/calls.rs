//! The calls a client makes, counted at the client: an SDK interceptor that notes each DynamoDB
//! operation (`Query`, `Scan`, ...) by its input, once, before its first attempt (an SDK retry
//! is not another call). For tests that must show what a use case reads (no Scan; reads in proportion
//! to what is due), through the real SDK against the emulator.

use std::sync::{Arc, Mutex};

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::BeforeSerializationInterceptorContextRef;
use aws_smithy_types::config_bag::ConfigBag;

/// The operations sent, in order; cloned handles share them.
#[derive(Debug, Clone, Default)]
pub struct Calls(Arc<Mutex<Vec<String>>>);

impl Calls {
    /// The operations sent since the last `take`, and forgets them.
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().expect("calls"))
    }

    /// A DynamoDB client on `config` whose calls are noted here.
    pub fn dynamodb(&self, config: &aws_config::SdkConfig) -> aws_sdk_dynamodb::Client {
        aws_sdk_dynamodb::Client::from_conf(
            aws_sdk_dynamodb::config::Builder::from(config).interceptor(self.clone()).build(),
        )
    }
}

impl Intercept for Calls {
    fn name(&self) -> &'static str {
        "baton-test-calls"
    }

    fn read_before_execution(
        &self,
        context: &BeforeSerializationInterceptorContextRef<'_>,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        use aws_sdk_dynamodb::operation as op;
        let input = context.input();
        let name = if input.downcast_ref::<op::query::QueryInput>().is_some() {
            "Query"
        } else if input.downcast_ref::<op::scan::ScanInput>().is_some() {
            "Scan"
        } else if input.downcast_ref::<op::get_item::GetItemInput>().is_some() {
            "GetItem"
        } else if input.downcast_ref::<op::put_item::PutItemInput>().is_some() {
            "PutItem"
        } else if input.downcast_ref::<op::update_item::UpdateItemInput>().is_some() {
            "UpdateItem"
        } else {
            "other"
        };
        self.0.lock().expect("calls").push(name.to_owned());
        Ok(())
    }
}
