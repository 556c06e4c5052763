// Package apiserver exists only to pin the Kubernetes builds used by kubeapp's tests: the
// module's three tools are kube-apiserver and, for testenv's cluster mode, kube-controller-manager
// and kube-scheduler, all from k8s.io/kubernetes at one version. See ../build.sh.
package apiserver
