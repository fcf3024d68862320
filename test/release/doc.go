// Package release holds no code: its tests check what ships beside the
// leasectl binary, with the real tools. The GitHub Action (action.yml and
// scripts/action.sh, run against real git repositories, building leasectl
// from source and installing a release archive), the release configuration
// (.goreleaser.yaml, checked and run by goreleaser for Linux), the container
// image's Dockerfile (its build command run here, since no Docker engine
// does), the Kubernetes example (parsed, its command line parsed by
// leasectl's own flags) and the Prometheus alerting rules (promtool check
// rules and promtool test rules).
package release
