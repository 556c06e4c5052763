// Package etcd exists only to pin the etcd build used by kubeapp's tests.
// See ../build.sh; the binary is built from go.etcd.io/etcd/server/v3.
package etcd
