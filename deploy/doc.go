// Package deploy holds no code of its own: its tests check the operator kit
// beside it — the Kubernetes manifests, the Prometheus rules, the Grafana
// dashboard and the systemd unit — with the tools and parsers that read them
// for real (kubectl kustomize and the Kubernetes API types, promtool and the
// PromQL parser, systemd-analyze), and against the metrics a running sonde
// exports.
//
// It is a module of its own so that the Kubernetes and Prometheus libraries
// these tests need never enter the dependency graph of sonde itself; it
// takes sonde's own module from the tree above (a replace directive), for
// the test support of package internal/testenv.
package deploy
