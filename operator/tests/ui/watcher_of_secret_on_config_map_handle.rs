// A watcher of Secrets cannot be attached to a ConfigMap handle.
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{Api, runtime::watcher};
use kubeapp_operator::{
    BoxError, Context, ControllerConfig, InformerController, InformerOptions, Watcher,
};

struct SecretWatcher;

impl Watcher<Secret> for SecretWatcher {
    async fn add(&self, _: Arc<Secret>, _: &Context) -> Result<(), BoxError> {
        Ok(())
    }
    async fn update(&self, _: Arc<Secret>, _: Arc<Secret>, _: &Context) -> Result<(), BoxError> {
        Ok(())
    }
    async fn delete(&self, _: Arc<Secret>, _: &Context) -> Result<(), BoxError> {
        Ok(())
    }
}

fn attach(client: kube::Client) {
    let controller = InformerController::new(ControllerConfig::default());
    let config_maps = controller.kind(
        Api::<ConfigMap>::all(client),
        watcher::Config::default(),
        InformerOptions::default(),
    );
    let _ = config_maps.watch(SecretWatcher);
}

fn main() {
    let _ = attach;
}
