// Package kwok exists only to pin the kwok build used by kubeapp's cluster mode (fake nodes and
// pods for testenv's `cluster()` and `kubeapp run`). See ../build.sh; the binary is built from
// sigs.k8s.io/kwok/cmd/kwok. kwok is built against other k8s.io versions than kube-apiserver,
// hence its own module.
package kwok
