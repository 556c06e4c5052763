// Package apiserver exists only to pin the kube-apiserver build used by kubeapp's tests.
// See ../build.sh; the binary is built from k8s.io/kubernetes/cmd/kube-apiserver.
package apiserver
