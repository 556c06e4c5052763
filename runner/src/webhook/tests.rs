use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body::Frame;
use http_body_util::{BodyExt as _, Full, StreamBody};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::core::admission::AdmissionRequest;
use kubeapp_sdk::app::{AdmissionError, App, AppError, ConversionError};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::*;

const GROUP: &str = "hooks.kubeapp.dev";

/// Gadgets: validated (size at most 10), mutated (a label added), converted between v1 and v2
/// (v2 renames `size` to `dimension`). Bombs: every hook panics. Plain: no hooks at all.
struct TestApp;

fn resource(kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(GROUP, "v1", kind))
}

#[async_trait]
impl App for TestApp {
    fn name(&self) -> &str {
        "hooks"
    }
    fn managed_kinds(&self) -> Vec<ApiResource> {
        vec![resource("Gadget"), resource("Bomb"), resource("Plain")]
    }
    async fn run(&self, _stop: CancellationToken) -> Result<(), AppError> {
        Ok(())
    }
    async fn validate(
        &self,
        request: &AdmissionRequest<DynamicObject>,
    ) -> Result<(), AdmissionError> {
        match request.kind.kind.as_str() {
            "Bomb" => panic!("validator exploded"),
            "Gadget" => {
                let size = request
                    .object
                    .as_ref()
                    .and_then(|o| o.data["spec"]["size"].as_i64())
                    .unwrap_or(0);
                if size > 10 {
                    return Err(AdmissionError::Denied {
                        message: format!("spec.size {size} is larger than 10"),
                        code: Some(422),
                    });
                }
                Ok(())
            }
            _ => Err(AdmissionError::NotImplemented {
                hook: "validation",
                kind: request.kind.kind.clone(),
                operation: request.operation.clone(),
            }),
        }
    }
    async fn mutate(
        &self,
        request: &AdmissionRequest<DynamicObject>,
    ) -> Result<DynamicObject, AdmissionError> {
        match (request.kind.kind.as_str(), &request.object) {
            ("Bomb", _) => panic!("mutator exploded"),
            ("Gadget", Some(object)) => {
                let mut changed = object.clone();
                changed
                    .metadata
                    .labels
                    .get_or_insert_with(Default::default)
                    .insert("mutated".into(), "yes".into());
                Ok(changed)
            }
            _ => Err(AdmissionError::NotImplemented {
                hook: "mutation",
                kind: request.kind.kind.clone(),
                operation: request.operation.clone(),
            }),
        }
    }
    async fn convert(&self, mut object: Value, desired: &str) -> Result<Value, ConversionError> {
        let spec = object["spec"].take();
        match desired {
            "hooks.kubeapp.dev/v2" => {
                object["spec"] = json!({ "dimension": spec["size"] });
            }
            "hooks.kubeapp.dev/v1" => object["spec"] = json!({ "size": spec["dimension"] }),
            other => {
                return Err(ConversionError::Failed {
                    kind: "Gadget".into(),
                    desired_api_version: other.into(),
                    message: "unknown version".into(),
                });
            }
        }
        object["apiVersion"] = json!(desired);
        Ok(object)
    }
}

fn admission_review(kind: &str, operation: &str, object: Value) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0df28fbd-5f5f-11e8-bc74-36e6bb280816",
            "kind": { "group": GROUP, "version": "v1", "kind": kind },
            "resource": { "group": GROUP, "version": "v1", "resource": "gadgets" },
            "operation": operation,
            "userInfo": { "username": "tester" },
            "object": object,
            "dryRun": false
        }
    })
}

fn gadget(size: i64) -> Value {
    json!({
        "apiVersion": "hooks.kubeapp.dev/v1",
        "kind": "Gadget",
        "metadata": { "name": "g", "namespace": "default" },
        "spec": { "size": size }
    })
}

fn app_router() -> WebhookRouter {
    router(vec![Arc::new(TestApp)], 64 * 1024)
}

/// A request body of one chunk, with no length announced (as a chunked upload).
fn streamed(
    bytes: Vec<u8>,
) -> StreamBody<impl futures::Stream<Item = Result<Frame<Bytes>, std::io::Error>>> {
    StreamBody::new(futures::stream::iter([Ok(Frame::data(Bytes::from(bytes)))]))
}

async fn post<B>(
    router: &WebhookRouter,
    path: &str,
    content_type: &str,
    body: B,
) -> (StatusCode, Vec<u8>)
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<crate::http_server::RequestBodyError>,
{
    let request = Request::post(path)
        .header("content-type", content_type)
        .body(body)
        .expect("request");
    let response = router.handle(request).await;
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (status, bytes.to_vec())
}

async fn post_json(router: &WebhookRouter, path: &str, body: &Value) -> (StatusCode, Value) {
    let (status, bytes) = post(
        router,
        path,
        "application/json",
        Full::new(Bytes::from(body.to_string())),
    )
    .await;
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, value)
}

#[tokio::test]
async fn validate_admits_valid_objects_and_denies_with_the_validators_message_and_code() {
    let router = app_router();
    let (status, review) = post_json(
        &router,
        "/validate",
        &admission_review("Gadget", "CREATE", gadget(3)),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(review["response"]["allowed"], true);
    assert_eq!(
        review["response"]["uid"],
        "0df28fbd-5f5f-11e8-bc74-36e6bb280816"
    );

    let (status, review) = post_json(
        &router,
        "/validate",
        &admission_review("Gadget", "CREATE", gadget(11)),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(review["response"]["allowed"], false);
    assert_eq!(
        review["response"]["status"]["message"],
        "spec.size 11 is larger than 10"
    );
    assert_eq!(review["response"]["status"]["code"], 422);
}

#[tokio::test]
async fn mutate_answers_with_the_json_patch_of_the_change() {
    let router = app_router();
    let (status, review) = post_json(
        &router,
        "/mutate",
        &admission_review("Gadget", "CREATE", gadget(3)),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(review["response"]["allowed"], true);
    assert_eq!(review["response"]["patchType"], "JSONPatch");
    // kube-core encodes the patch bytes as a JSON array of numbers, which the apiserver's JSON
    // decoder accepts for a []byte field as well as base64.
    let patch: Vec<u8> =
        serde_json::from_value(review["response"]["patch"].clone()).expect("patch bytes");
    let patch: Value = serde_json::from_slice(&patch).expect("patch JSON");
    assert_eq!(
        patch,
        json!([{ "op": "add", "path": "/metadata/labels", "value": { "mutated": "yes" } }])
    );
}

#[tokio::test]
async fn convert_converts_every_object_to_the_desired_version() {
    let router = app_router();
    let review = json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "ConversionReview",
        "request": {
            "uid": "c1",
            "desiredAPIVersion": "hooks.kubeapp.dev/v2",
            "objects": [gadget(1), gadget(2)]
        }
    });
    let (status, answer) = post_json(&router, "/convert", &review).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answer["response"]["result"]["status"], "Success");
    let objects = answer["response"]["convertedObjects"]
        .as_array()
        .expect("objects");
    assert_eq!(objects.len(), 2);
    assert_eq!(objects[1]["apiVersion"], "hooks.kubeapp.dev/v2");
    assert_eq!(objects[1]["spec"], json!({ "dimension": 2 }));
}

#[tokio::test]
async fn malformed_bodies_get_400_with_a_message() {
    let router = app_router();
    for (path, body) in [
        ("/validate", "{not json"),
        ("/mutate", r#"{"kind": "AdmissionReview"}"#),
        ("/convert", "[1, 2, 3]"),
    ] {
        let (status, text) = post(
            &router,
            path,
            "application/json",
            Full::new(Bytes::from(body)),
        )
        .await;
        let text = String::from_utf8_lossy(&text);
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {text}");
        assert!(
            text.contains("malformed") || text.contains("without a usable request"),
            "{path}: {text}"
        );
    }
}

#[tokio::test]
async fn an_oversized_body_gets_413_naming_the_limit() {
    let router = router(vec![Arc::new(TestApp)], 1024);
    let big = json!({ "pad": "x".repeat(4096) }).to_string();
    // Chunked (no length announced): refused once the limit is passed.
    let (status, text) = post(
        &router,
        "/validate",
        "application/json",
        streamed(big.into_bytes()),
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    let text = String::from_utf8_lossy(&text);
    assert!(
        text.contains("larger than the limit of 1024 bytes"),
        "{text}"
    );
}

/// An announced length past the limit is refused before the body is read at all: hyper sends
/// `100 Continue` only when a body is first read, so an expecting client is spared the upload.
#[tokio::test]
async fn an_announced_length_past_the_limit_is_refused_without_reading_the_body() {
    let router = router(vec![Arc::new(TestApp)], 1024);
    let polled = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let body = futures::stream::once({
        let polled = Arc::clone(&polled);
        async move {
            polled.store(true, std::sync::atomic::Ordering::SeqCst);
            Ok::<_, std::io::Error>(Frame::data(Bytes::from(vec![b'x'; 4096])))
        }
    });
    let request = Request::post("/validate")
        .header("content-type", "application/json")
        .header("content-length", "4096")
        .body(StreamBody::new(body))
        .expect("request");
    let response = router.handle(request).await;
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert!(
        !polled.load(std::sync::atomic::Ordering::SeqCst),
        "the body was read before the refusal"
    );
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    let text = String::from_utf8_lossy(&bytes);
    assert!(
        text.contains("4096 bytes (Content-Length) is larger than the limit of 1024 bytes"),
        "{text}"
    );
}

#[tokio::test]
async fn a_wrong_content_type_gets_415() {
    let router = app_router();
    let body = admission_review("Gadget", "CREATE", gadget(1)).to_string();
    let (status, text) = post(
        &router,
        "/validate",
        "text/plain",
        Full::new(Bytes::from(body)),
    )
    .await;
    assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert!(String::from_utf8_lossy(&text).contains("application/json"));
}

#[tokio::test]
async fn a_missing_handler_or_unmanaged_kind_gets_404_naming_it() {
    let router = app_router();
    let (status, text) = post_json(
        &router,
        "/validate",
        &admission_review("Plain", "CREATE", gadget(1)),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(
        text.as_str()
            .is_some_and(|t| t.contains("validation is not implemented for Plain")),
        "{text}"
    );

    let (status, text) = post_json(
        &router,
        "/mutate",
        &admission_review("Stranger", "CREATE", gadget(1)),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(
        text.as_str()
            .is_some_and(|t| t.contains("no app manages kind Stranger")),
        "{text}"
    );
}

#[tokio::test]
async fn a_panicking_handler_gets_500_and_the_server_keeps_serving() {
    let router = app_router();
    let (status, text) = post_json(
        &router,
        "/validate",
        &admission_review("Bomb", "CREATE", gadget(1)),
    )
    .await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(
        text.as_str()
            .is_some_and(|t| t.contains("validator exploded")),
        "{text}"
    );
    let (status, text) = post_json(
        &router,
        "/mutate",
        &admission_review("Bomb", "CREATE", gadget(1)),
    )
    .await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(
        text.as_str()
            .is_some_and(|t| t.contains("mutator exploded")),
        "{text}"
    );
    // The same router answers the next request normally.
    let (status, review) = post_json(
        &router,
        "/validate",
        &admission_review("Gadget", "CREATE", gadget(1)),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(review["response"]["allowed"], true);
}

/// Writes a fresh serving certificate for 127.0.0.1 from `ca` to the two files, atomically (write
/// then rename, as Kubernetes' Secret volumes rotate), and returns its DER.
fn write_cert(ca: &kubeapp_sdk::testenv::CertificateAuthority, dir: &std::path::Path) -> Vec<u8> {
    use rustls_pki_types::pem::PemObject as _;
    let issued = ca.issue_serving(&["127.0.0.1"]).expect("issue");
    for (name, pem) in [("tls.crt", &issued.cert_pem), ("tls.key", &issued.key_pem)] {
        let tmp = dir.join(format!("{name}.tmp"));
        std::fs::write(&tmp, pem).expect("write");
        std::fs::rename(&tmp, dir.join(name)).expect("rename");
    }
    rustls_pki_types::CertificateDer::from_pem_slice(issued.cert_pem.as_bytes())
        .expect("pem")
        .to_vec()
}

/// Connects over TLS (trusting `ca_pem`) and returns the certificate the server presented.
async fn presented_cert(addr: SocketAddr, ca_pem: &str) -> Vec<u8> {
    use rustls_pki_types::pem::PemObject as _;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls_pki_types::CertificateDer::from_pem_slice(ca_pem.as_bytes()).expect("ca"))
        .expect("add root");
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let name = rustls_pki_types::ServerName::try_from("127.0.0.1").expect("name");
    let tls = connector.connect(name, tcp).await.expect("handshake");
    tls.get_ref()
        .1
        .peer_certificates()
        .expect("server certificate")[0]
        .to_vec()
}

#[tokio::test]
async fn certificate_rotation_is_used_by_the_next_handshake() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = kubeapp_sdk::testenv::CertificateAuthority::new("webhook-test-ca").expect("ca");
    let first = write_cert(&ca, dir.path());
    let config = WebhookConfig::new(dir.path().join("tls.crt"), dir.path().join("tls.key"))
        .addr(SocketAddr::from(([127, 0, 0, 1], 0)));
    let server = WebhookServer::bind(config, vec![Arc::new(TestApp)])
        .await
        .expect("bind");
    let addr = server.local_addr();
    let stop = CancellationToken::new();
    let serving = tokio::spawn(server.serve(stop.clone()));

    assert_eq!(presented_cert(addr, &ca.cert_pem()).await, first);
    let second = write_cert(&ca, dir.path());
    assert_ne!(first, second);
    assert_eq!(
        presented_cert(addr, &ca.cert_pem()).await,
        second,
        "the next handshake uses the new file"
    );

    // Broken files (a rotation half done) keep the last good certificate in use.
    std::fs::write(dir.path().join("tls.key"), "not a key").expect("write");
    assert_eq!(presented_cert(addr, &ca.cert_pem()).await, second);

    stop.cancel();
    serving.await.expect("joined").expect("served");
}

#[tokio::test]
async fn a_missing_certificate_file_is_an_error_naming_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = WebhookConfig::new(dir.path().join("absent.crt"), dir.path().join("absent.key"))
        .addr(SocketAddr::from(([127, 0, 0, 1], 0)));
    let err = WebhookServer::bind(config, Vec::new())
        .await
        .expect_err("no files");
    assert!(err.to_string().contains("absent.crt"), "{err}");
}
