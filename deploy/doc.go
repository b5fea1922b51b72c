// Package deploy holds moat's Kubernetes deployment: plain manifests in
// deploy/kubernetes (a Kustomize base: kubectl apply -k deploy/kubernetes),
// the same as a Helm chart in deploy/helm/moat, the image's Containerfile
// (and Containerfile.scratch, which `make image` builds with podman), and
// README.md, which says what moat's kernel layers can and cannot do in an
// unprivileged pod.
//
// The package has no code. Its test (deploy_test.go) decodes every
// manifest strictly into the Kubernetes API types, parses the ConfigMap's
// server.yaml with the server's own loader, and holds the security
// properties of the pods, so that the manifests cannot drift from the
// server they deploy; helm_test.go holds the chart to the manifests, and
// image_test.go runs the built image as the Deployment runs it.
package deploy
