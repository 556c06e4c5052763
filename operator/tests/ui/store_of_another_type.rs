// A ConfigMap handle's store is a Store<ConfigMap>, never a Store<Secret>.
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{Api, runtime::watcher};
use kubeapp_operator::{ControllerConfig, InformerController, InformerOptions, Store};

fn store(client: kube::Client) -> Store<Secret> {
    let controller = InformerController::new(ControllerConfig::default());
    let config_maps = controller.kind(
        Api::<ConfigMap>::all(client),
        watcher::Config::default(),
        InformerOptions::default(),
    );
    config_maps.store()
}

fn main() {
    let _ = store;
}
