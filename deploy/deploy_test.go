package deploy_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/intstr"
	k8syaml "sigs.k8s.io/yaml"

	"github.com/moat-sandbox/moat/host"
	"github.com/moat-sandbox/moat/host/secrets"
	"github.com/moat-sandbox/moat/languages/python"
	"github.com/moat-sandbox/moat/languages/ruby"
	"github.com/moat-sandbox/moat/policy"
	"github.com/moat-sandbox/moat/server"
	"github.com/moat-sandbox/moat/toolchains"
)

// kinds are the only objects deploy/ may hold, each decoded into its API
// type. Anything else (a Pod, a ClusterRole, a misspelt kind, an old
// apiVersion) is refused: a new kind is a decision, made here.
var kinds = map[schema.GroupVersionKind]func() runtime.Object{
	appsv1.SchemeGroupVersion.WithKind("Deployment"):            func() runtime.Object { return &appsv1.Deployment{} },
	corev1.SchemeGroupVersion.WithKind("Service"):               func() runtime.Object { return &corev1.Service{} },
	corev1.SchemeGroupVersion.WithKind("ConfigMap"):             func() runtime.Object { return &corev1.ConfigMap{} },
	corev1.SchemeGroupVersion.WithKind("Secret"):                func() runtime.Object { return &corev1.Secret{} },
	corev1.SchemeGroupVersion.WithKind("ServiceAccount"):        func() runtime.Object { return &corev1.ServiceAccount{} },
	corev1.SchemeGroupVersion.WithKind("Namespace"):             func() runtime.Object { return &corev1.Namespace{} },
	policyv1.SchemeGroupVersion.WithKind("PodDisruptionBudget"): func() runtime.Object { return &policyv1.PodDisruptionBudget{} },
	networkingv1.SchemeGroupVersion.WithKind("NetworkPolicy"):   func() runtime.Object { return &networkingv1.NetworkPolicy{} },
}

// kustomizationGVK is the one object that is not a Kubernetes API type:
// kustomize's own file, decoded into the few fields deploy/ uses.
var kustomizationGVK = schema.GroupVersionKind{Group: "kustomize.config.k8s.io", Version: "v1beta1", Kind: "Kustomization"}

type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag,omitempty"`
	} `json:"images,omitempty"`
}

// decoder is the API server's strict decoding: unknown or mis-cased
// fields and duplicate keys are errors, as `kubectl apply` with server-side
// field validation makes them.
var decoder = func() runtime.Decoder {
	s := runtime.NewScheme()
	for gvk, newObj := range kinds {
		s.AddKnownTypeWithName(gvk, newObj())
	}
	return serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDeserializer()
}()

// manifest is one decoded YAML document.
type manifest struct {
	file string // relative to deploy/
	doc  int    // index of the document in the file
	obj  runtime.Object
}

func (m manifest) String() string { return fmt.Sprintf("%s#%d", m.file, m.doc) }

var docSeparator = regexp.MustCompile(`(?m)^---[ \t]*$`)

// splitDocs splits a multi-document YAML file, dropping documents that
// hold only comments.
func splitDocs(data []byte) [][]byte {
	var out [][]byte
	for _, d := range docSeparator.Split(string(data), -1) {
		empty := true
		for line := range strings.SplitSeq(d, "\n") {
			if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
				empty = false
				break
			}
		}
		if !empty {
			out = append(out, []byte(d))
		}
	}
	return out
}

// decodeDoc decodes one document strictly into its type.
func decodeDoc(data []byte) (runtime.Object, *kustomization, error) {
	var tm metav1.TypeMeta
	if err := k8syaml.Unmarshal(data, &tm); err != nil {
		return nil, nil, err
	}
	gvk := schema.FromAPIVersionAndKind(tm.APIVersion, tm.Kind)
	if gvk == kustomizationGVK {
		js, err := k8syaml.YAMLToJSONStrict(data)
		if err != nil {
			return nil, nil, err
		}
		dec := json.NewDecoder(bytes.NewReader(js))
		dec.DisallowUnknownFields()
		var k kustomization
		if err := dec.Decode(&k); err != nil {
			return nil, nil, fmt.Errorf("kustomization: %w", err)
		}
		return nil, &k, nil
	}
	if _, ok := kinds[gvk]; !ok {
		return nil, nil, fmt.Errorf("unknown kind %q of apiVersion %q: deploy/ holds only %s", tm.Kind, tm.APIVersion, knownKinds())
	}
	obj, got, err := decoder.Decode(data, nil, nil)
	if err != nil {
		return nil, nil, err
	}
	if *got != gvk {
		return nil, nil, fmt.Errorf("decoded as %v, want %v", got, gvk)
	}
	return obj, nil, nil
}

func knownKinds() string {
	var s []string
	for gvk := range kinds {
		s = append(s, gvk.GroupVersion().String()+" "+gvk.Kind)
	}
	slices.Sort(s)
	return strings.Join(s, ", ")
}

// bundle is everything deploy/ holds, decoded.
type bundle struct {
	dir           string // deploy/
	manifests     []manifest
	kust          *kustomization
	kustFile      string
	containerfile string
}

// loadBundle reads every *.yaml under dir; a document that does not decode
// strictly fails the test.
func loadBundle(t *testing.T, dir string) *bundle {
	t.Helper()
	b := &bundle{dir: dir}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		// The Helm chart's files are templates and values, not objects:
		// helm_test.go renders them and checks what they render.
		if err == nil && d.IsDir() && filepath.Clean(p) == filepath.Join(dir, "helm") {
			return filepath.SkipDir
		}
		if err != nil || d.IsDir() || (!strings.HasSuffix(p, ".yaml") && !strings.HasSuffix(p, ".yml")) {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		docs := splitDocs(data)
		if len(docs) == 0 {
			t.Errorf("%s: no document", rel)
		}
		for i, doc := range docs {
			obj, k, err := decodeDoc(doc)
			switch {
			case err != nil:
				t.Errorf("%s#%d: %v", rel, i, err)
			case k != nil:
				if b.kust != nil {
					t.Errorf("%s#%d: a second Kustomization (first in %s)", rel, i, b.kustFile)
				}
				b.kust, b.kustFile = k, rel
			default:
				b.manifests = append(b.manifests, manifest{file: rel, doc: i, obj: obj})
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	cf, err := os.ReadFile(filepath.Join(dir, "Containerfile"))
	if err != nil {
		t.Fatal(err)
	}
	b.containerfile = string(cf)
	if t.Failed() {
		t.FailNow()
	}
	return b
}

// applied reports whether m is one of the files kustomization.yaml applies.
func (b *bundle) applied(m manifest) bool {
	if b.kust == nil {
		return false
	}
	base := path.Dir(filepath.ToSlash(b.kustFile))
	for _, r := range b.kust.Resources {
		if path.Join(base, r) == filepath.ToSlash(m.file) {
			return true
		}
	}
	return false
}

// only returns the applied objects of type T.
func only[T runtime.Object](b *bundle, appliedOnly bool) []T {
	var out []T
	for _, m := range b.manifests {
		if o, ok := m.obj.(T); ok && (!appliedOnly || b.applied(m)) {
			out = append(out, o)
		}
	}
	return out
}

func (b *bundle) deployment() *appsv1.Deployment {
	if d := only[*appsv1.Deployment](b, true); len(d) == 1 {
		return d[0]
	}
	return nil
}

// moatContainer is the Deployment's container named moat.
func (b *bundle) moatContainer() *corev1.Container {
	d := b.deployment()
	if d == nil {
		return nil
	}
	for i := range d.Spec.Template.Spec.Containers {
		if c := &d.Spec.Template.Spec.Containers[i]; c.Name == "moat" {
			return c
		}
	}
	return nil
}

func (b *bundle) configMap(name string) *corev1.ConfigMap {
	for _, c := range only[*corev1.ConfigMap](b, true) {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// exampleSecret is the Secret of that name, applied or example: the
// operator creates the real one, with the example's keys.
func (b *bundle) exampleSecret(name string) *corev1.Secret {
	for _, s := range only[*corev1.Secret](b, false) {
		if s.Name == name {
			return s
		}
	}
	return nil
}

func secretKeys(s *corev1.Secret) map[string]string {
	out := map[string]string{}
	for k, v := range s.Data {
		out[k] = string(v)
	}
	for k, v := range s.StringData {
		out[k] = v
	}
	return out
}

// check is one property of deploy/; it returns the problems it finds.
type check struct {
	name string
	fn   func(b *bundle) []string
}

var checks = []check{
	{"kustomization", checkKustomization},
	{"kinds", checkKinds},
	{"namespace", checkNamespace},
	{"service account", checkServiceAccount},
	{"pod security", checkPodSecurity},
	{"command", checkCommand},
	{"probes", checkProbes},
	{"secret refs", checkSecretRefs},
	{"resources", checkResources},
	{"selectors", checkSelectors},
	{"spread and disruption", checkSpread},
	{"network policy", checkNetworkPolicy},
	{"example network policy", checkExampleNetworkPolicy},
	{"server config", checkServerConfig},
	{"schema migration", checkMigrate},
	{"containerfile", checkContainerfile},
	{"traces", checkTraces},
	{"native proc", checkNativeProc},
}

// TestManifests decodes every manifest under deploy/ strictly and holds
// each property of checks.
func TestManifests(t *testing.T) {
	b := loadBundle(t, ".")
	if len(b.manifests) == 0 {
		t.Fatal("no manifests under deploy/")
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			for _, p := range c.fn(b) {
				t.Error(p)
			}
		})
	}
}

func checkKustomization(b *bundle) []string {
	if b.kust == nil {
		return []string{"no kustomization.yaml"}
	}
	var out []string
	base := path.Dir(filepath.ToSlash(b.kustFile))
	listed := map[string]bool{}
	for _, r := range b.kust.Resources {
		p := path.Join(base, r)
		listed[p] = true
		if !slices.ContainsFunc(b.manifests, func(m manifest) bool { return filepath.ToSlash(m.file) == p }) {
			out = append(out, fmt.Sprintf("%s lists %s, which holds no manifest", b.kustFile, r))
		}
	}
	for _, m := range b.manifests {
		f := filepath.ToSlash(m.file)
		if path.Dir(f) == base && !listed[f] && !strings.Contains(path.Base(f), ".example.") {
			out = append(out, fmt.Sprintf("%s is neither in %s nor named *.example.yaml: it would silently not be applied", f, b.kustFile))
		}
		if listed[f] && strings.Contains(path.Base(f), ".example.") {
			out = append(out, fmt.Sprintf("%s is an example but %s applies it", f, b.kustFile))
		}
	}
	return out
}

func checkKinds(b *bundle) []string {
	var out []string
	want := map[string]int{"Namespace": 1, "ServiceAccount": 1, "ConfigMap": 1, "Deployment": 1, "Service": 1, "PodDisruptionBudget": 1}
	got := map[string]int{}
	for _, m := range b.manifests {
		if !b.applied(m) {
			continue
		}
		k := m.obj.GetObjectKind().GroupVersionKind().Kind
		got[k]++
		if k == "Secret" {
			out = append(out, fmt.Sprintf("%v: kustomization.yaml applies a Secret; secrets are the operator's (secret.example.yaml)", m))
		}
	}
	for k, n := range want {
		if got[k] != n {
			out = append(out, fmt.Sprintf("kustomization.yaml applies %d %s, want %d", got[k], k, n))
		}
	}
	if got["NetworkPolicy"] == 0 {
		out = append(out, "kustomization.yaml applies no NetworkPolicy")
	}
	return out
}

func checkNamespace(b *bundle) []string {
	nss := only[*corev1.Namespace](b, true)
	if len(nss) != 1 {
		return []string{"want one Namespace"}
	}
	ns := nss[0]
	var out []string
	for _, mode := range []string{"enforce", "audit", "warn"} {
		if v := ns.Labels["pod-security.kubernetes.io/"+mode]; v != "restricted" {
			out = append(out, fmt.Sprintf("Namespace %s: label pod-security.kubernetes.io/%s is %q, want restricted", ns.Name, mode, v))
		}
	}
	for _, m := range b.manifests {
		if _, isNS := m.obj.(*corev1.Namespace); isNS {
			continue
		}
		acc, err := metaOf(m.obj)
		if err != nil {
			out = append(out, err.Error())
		} else if acc.GetNamespace() != ns.Name {
			out = append(out, fmt.Sprintf("%v: namespace %q, want %q", m, acc.GetNamespace(), ns.Name))
		}
	}
	return out
}

func metaOf(o runtime.Object) (metav1.Object, error) {
	acc, ok := o.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T has no metadata", o)
	}
	return acc, nil
}

func checkServiceAccount(b *bundle) []string {
	d := b.deployment()
	sas := only[*corev1.ServiceAccount](b, true)
	if d == nil || len(sas) != 1 {
		return []string{"want one Deployment and one ServiceAccount"}
	}
	var out []string
	sa, ps := sas[0], d.Spec.Template.Spec
	if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
		out = append(out, fmt.Sprintf("ServiceAccount %s: automountServiceAccountToken must be false", sa.Name))
	}
	if ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken {
		out = append(out, "Deployment: pod automountServiceAccountToken must be false")
	}
	if ps.ServiceAccountName != sa.Name {
		out = append(out, fmt.Sprintf("Deployment: serviceAccountName %q, want %q", ps.ServiceAccountName, sa.Name))
	}
	return out
}

// checkPodSecurity holds what Pod Security Admission's restricted profile
// demands, and more (a read-only root), for every container.
func checkPodSecurity(b *bundle) []string {
	d := b.deployment()
	if d == nil {
		return []string{"want one Deployment"}
	}
	ps := d.Spec.Template.Spec
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	if ps.HostNetwork || ps.HostPID || ps.HostIPC {
		bad("pod: hostNetwork, hostPID and hostIPC must be false")
	}
	for _, v := range ps.Volumes {
		if v.HostPath != nil {
			bad("volume %s: hostPath", v.Name)
		}
	}
	psc := ps.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	containers := append(append([]corev1.Container{}, ps.InitContainers...), ps.Containers...)
	if len(containers) == 0 {
		bad("pod: no containers")
	}
	for _, c := range containers {
		sc := c.SecurityContext
		if sc == nil {
			sc = &corev1.SecurityContext{}
		}
		nonRoot := cmpOr(sc.RunAsNonRoot, psc.RunAsNonRoot)
		if nonRoot == nil || !*nonRoot {
			bad("container %s: runAsNonRoot must be true", c.Name)
		}
		if uid := cmpOr(sc.RunAsUser, psc.RunAsUser); uid == nil || *uid == 0 {
			bad("container %s: runAsUser must be a fixed non-zero uid", c.Name)
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			bad("container %s: readOnlyRootFilesystem must be true", c.Name)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			bad("container %s: allowPrivilegeEscalation must be false", c.Name)
		}
		if sc.Privileged != nil && *sc.Privileged {
			bad("container %s: privileged", c.Name)
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			bad("container %s: capabilities must drop ALL", c.Name)
		}
		if sc.Capabilities != nil && len(sc.Capabilities.Add) > 0 {
			bad("container %s: adds capabilities %v", c.Name, sc.Capabilities.Add)
		}
		seccomp := cmpOr(sc.SeccompProfile, psc.SeccompProfile)
		if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
			bad("container %s: seccompProfile must be RuntimeDefault", c.Name)
		}
	}
	return out
}

// cmpOr returns the first non-nil pointer: a container's setting
// overrides the pod's.
func cmpOr[T any](ps ...*T) *T {
	for _, p := range ps {
		if p != nil {
			return p
		}
	}
	return nil
}

// mountedFile returns the ConfigMap or Secret volume key behind the file
// path p in container c, as "configmap NAME KEY" or "secret NAME KEY".
func mountedFile(ps corev1.PodSpec, c *corev1.Container, p string) (kind, name, key string, ok bool) {
	for _, vm := range c.VolumeMounts {
		rel, found := strings.CutPrefix(p, strings.TrimSuffix(vm.MountPath, "/")+"/")
		if !found || vm.SubPath != "" {
			continue
		}
		for _, v := range ps.Volumes {
			if v.Name != vm.Name {
				continue
			}
			var items []corev1.KeyToPath
			switch {
			case v.ConfigMap != nil:
				kind, name, items = "configmap", v.ConfigMap.Name, v.ConfigMap.Items
			case v.Secret != nil:
				kind, name, items = "secret", v.Secret.SecretName, v.Secret.Items
			default:
				continue
			}
			if len(items) == 0 {
				return kind, name, rel, true
			}
			for _, it := range items {
				if it.Path == rel {
					return kind, name, it.Key, true
				}
			}
		}
	}
	return "", "", "", false
}

// writableDir reports whether p is on a writable emptyDir of c, and that
// emptyDir's sizeLimit.
func writableDir(ps corev1.PodSpec, c *corev1.Container, p string) (*resource.Quantity, bool) {
	for _, vm := range c.VolumeMounts {
		mp := strings.TrimSuffix(vm.MountPath, "/")
		if vm.ReadOnly || (p != mp && !strings.HasPrefix(p, mp+"/")) {
			continue
		}
		for _, v := range ps.Volumes {
			if v.Name == vm.Name && v.EmptyDir != nil {
				return v.EmptyDir.SizeLimit, true
			}
		}
	}
	return nil, false
}

// configPath is the --config argument of moat serve.
func configPath(c *corev1.Container) (string, error) {
	argv := append(append([]string{}, c.Command...), c.Args...)
	if len(argv) < 2 || path.Base(argv[0]) != "moat" || argv[1] != "serve" {
		return "", fmt.Errorf("container %s runs %q, want moat serve --config FILE", c.Name, argv)
	}
	for i, a := range argv {
		if a == "--config" && i+1 < len(argv) {
			return argv[i+1], nil
		}
		if v, ok := strings.CutPrefix(a, "--config="); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("container %s runs %q without --config", c.Name, argv)
}

func checkCommand(b *bundle) []string {
	d, c := b.deployment(), b.moatContainer()
	if c == nil {
		return []string{"Deployment: no container named moat"}
	}
	p, err := configPath(c)
	if err != nil {
		return []string{err.Error()}
	}
	kind, name, key, ok := mountedFile(d.Spec.Template.Spec, c, p)
	if !ok || kind != "configmap" {
		return []string{fmt.Sprintf("--config %s is not a file of a mounted ConfigMap", p)}
	}
	cm := b.configMap(name)
	if cm == nil {
		return []string{fmt.Sprintf("--config %s: ConfigMap %s is not applied", p, name)}
	}
	if _, ok := cm.Data[key]; !ok {
		return []string{fmt.Sprintf("--config %s: ConfigMap %s has no key %s", p, name, key)}
	}
	return nil
}

// containerPort resolves a probe's or a policy's port (a number or a
// name) to c's container port.
func containerPort(c *corev1.Container, p intstr.IntOrString) (int32, bool) {
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && p.StrVal == cp.Name) || (p.Type == intstr.Int && p.IntVal == cp.ContainerPort) {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

// servePort is the port of the container's listen address, as the server
// config says.
func servePort(b *bundle) (int32, error) {
	cfg, err := serverConfig(b)
	if err != nil {
		return 0, err
	}
	_, port, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(port)
	return int32(n), err
}

func checkProbes(b *bundle) []string {
	c := b.moatContainer()
	if c == nil {
		return []string{"Deployment: no container named moat"}
	}
	port, err := servePort(b)
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
		must  bool
	}{
		{"livenessProbe", c.LivenessProbe, "/healthz", true},
		{"readinessProbe", c.ReadinessProbe, "/readyz", true},
		{"startupProbe", c.StartupProbe, "/healthz", false},
	} {
		if p.probe == nil {
			if p.must {
				out = append(out, fmt.Sprintf("container %s: no %s", c.Name, p.name))
			}
			continue
		}
		g := p.probe.HTTPGet
		if g == nil {
			out = append(out, fmt.Sprintf("%s: want httpGet %s", p.name, p.path))
			continue
		}
		if g.Path != p.path {
			out = append(out, fmt.Sprintf("%s: path %q, want %q", p.name, g.Path, p.path))
		}
		if n, ok := containerPort(c, g.Port); !ok || n != port {
			out = append(out, fmt.Sprintf("%s: port %s is not the container port the server listens on (%d)", p.name, g.Port.String(), port))
		}
		if g.Scheme != "" && g.Scheme != corev1.URISchemeHTTP {
			out = append(out, fmt.Sprintf("%s: scheme %s, but the server config has no TLS", p.name, g.Scheme))
		}
	}
	return out
}

func checkSecretRefs(b *bundle) []string {
	d, c := b.deployment(), b.moatContainer()
	if c == nil {
		return []string{"Deployment: no container named moat"}
	}
	var out []string
	need := func(what, name, key string) {
		s := b.exampleSecret(name)
		if s == nil {
			out = append(out, fmt.Sprintf("%s: no Secret %s, not even an example", what, name))
		} else if _, ok := secretKeys(s)[key]; !ok {
			out = append(out, fmt.Sprintf("%s: Secret %s has no key %q", what, name, key))
		}
	}
	dbURL := false
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			if e.Name == "MOAT_DATABASE_URL" {
				out = append(out, "MOAT_DATABASE_URL is written in the Deployment; take it from a Secret (secretKeyRef)")
			}
			continue
		}
		if r := e.ValueFrom.SecretKeyRef; r != nil {
			need("env "+e.Name, r.Name, r.Key)
			dbURL = dbURL || e.Name == "MOAT_DATABASE_URL"
		}
		if r := e.ValueFrom.ConfigMapKeyRef; r != nil {
			if cm := b.configMap(r.Name); cm == nil || cm.Data[r.Key] == "" {
				out = append(out, fmt.Sprintf("env %s: ConfigMap %s has no key %q", e.Name, r.Name, r.Key))
			}
		}
	}
	if !dbURL {
		out = append(out, "container moat: no MOAT_DATABASE_URL from a secretKeyRef")
	}
	// The secrets key (host/secrets): without it the secrets routes and
	// every grant that injects a secret refuse, and replicas with different
	// keys cannot open each other's secrets. Only from a Secret.
	secretsKey := false
	for _, e := range c.Env {
		if e.Name != secrets.EnvKey {
			continue
		}
		if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			out = append(out, secrets.EnvKey+" is not taken from a Secret (secretKeyRef): the key would sit in the Deployment")
		} else {
			secretsKey = true
		}
	}
	if !secretsKey {
		out = append(out, "container moat: no "+secrets.EnvKey+" from a secretKeyRef: moat secrets and secret injection would refuse")
	}
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Secret != nil {
			for _, it := range v.Secret.Items {
				need("volume "+v.Name, v.Secret.SecretName, it.Key)
			}
		}
		if v.ConfigMap != nil {
			for _, it := range v.ConfigMap.Items {
				if cm := b.configMap(v.ConfigMap.Name); cm == nil || cm.Data[it.Key] == "" {
					out = append(out, fmt.Sprintf("volume %s: ConfigMap %s has no key %q", v.Name, v.ConfigMap.Name, it.Key))
				}
			}
		}
	}
	return out
}

func checkResources(b *bundle) []string {
	d, c := b.deployment(), b.moatContainer()
	if c == nil {
		return []string{"Deployment: no container named moat"}
	}
	var out []string
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage} {
		if _, ok := c.Resources.Requests[r]; !ok {
			out = append(out, fmt.Sprintf("container %s: no %s request", c.Name, r))
		}
		if _, ok := c.Resources.Limits[r]; !ok {
			out = append(out, fmt.Sprintf("container %s: no %s limit", c.Name, r))
		}
	}
	var sum resource.Quantity
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.EmptyDir == nil {
			continue
		}
		if v.EmptyDir.SizeLimit == nil || v.EmptyDir.SizeLimit.IsZero() {
			out = append(out, fmt.Sprintf("emptyDir %s: no sizeLimit; a job could fill the node's disk", v.Name))
			continue
		}
		if v.EmptyDir.Medium == corev1.StorageMediumMemory {
			continue // counted against the memory limit instead
		}
		sum.Add(*v.EmptyDir.SizeLimit)
	}
	if lim, ok := c.Resources.Limits[corev1.ResourceEphemeralStorage]; ok && sum.Cmp(lim) > 0 {
		out = append(out, fmt.Sprintf("the emptyDirs' sizeLimits add up to %s, more than the ephemeral-storage limit %s", sum.String(), lim.String()))
	}
	return out
}

func selects(sel *metav1.LabelSelector, podLabels map[string]string) bool {
	if sel == nil {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && !s.Empty() && s.Matches(labels.Set(podLabels))
}

func checkSelectors(b *bundle) []string {
	d := b.deployment()
	if d == nil {
		return []string{"want one Deployment"}
	}
	pod := d.Spec.Template.Labels
	var out []string
	if !selects(d.Spec.Selector, pod) {
		out = append(out, "Deployment: selector does not select its own pods")
	}
	for _, s := range only[*corev1.Service](b, true) {
		if len(s.Spec.Selector) == 0 || !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(pod)) {
			out = append(out, fmt.Sprintf("Service %s: selector %v does not select the moat pods", s.Name, s.Spec.Selector))
		}
		c := b.moatContainer()
		for _, p := range s.Spec.Ports {
			if c == nil {
				break
			}
			if _, ok := containerPort(c, p.TargetPort); !ok {
				out = append(out, fmt.Sprintf("Service %s: targetPort %s is no port of container moat", s.Name, p.TargetPort.String()))
			}
		}
	}
	for _, p := range only[*policyv1.PodDisruptionBudget](b, true) {
		if !selects(p.Spec.Selector, pod) {
			out = append(out, fmt.Sprintf("PodDisruptionBudget %s: selector does not select the moat pods", p.Name))
		}
	}
	for _, n := range only[*networkingv1.NetworkPolicy](b, false) {
		if !selects(&n.Spec.PodSelector, pod) {
			out = append(out, fmt.Sprintf("NetworkPolicy %s: podSelector does not select the moat pods", n.Name))
		}
	}
	return out
}

func checkSpread(b *bundle) []string {
	d := b.deployment()
	if d == nil {
		return []string{"want one Deployment"}
	}
	var out []string
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
		out = append(out, "Deployment: want at least 2 replicas (default 3)")
	}
	pod, ps := d.Spec.Template.Labels, d.Spec.Template.Spec
	spread := slices.ContainsFunc(ps.TopologySpreadConstraints, func(c corev1.TopologySpreadConstraint) bool {
		return c.TopologyKey == "kubernetes.io/hostname" && c.MaxSkew == 1 && c.WhenUnsatisfiable == corev1.DoNotSchedule && selects(c.LabelSelector, pod)
	})
	if a := ps.Affinity; a != nil && a.PodAntiAffinity != nil {
		spread = spread || slices.ContainsFunc(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution, func(t corev1.PodAffinityTerm) bool {
			return t.TopologyKey == "kubernetes.io/hostname" && selects(t.LabelSelector, pod)
		})
	}
	if !spread {
		out = append(out, "Deployment: no topology spread (maxSkew 1, DoNotSchedule) or required anti-affinity across kubernetes.io/hostname")
	}
	pdbs := only[*policyv1.PodDisruptionBudget](b, true)
	for _, p := range pdbs {
		switch {
		case p.Spec.MaxUnavailable != nil && p.Spec.MinAvailable == nil:
			if p.Spec.MaxUnavailable.Type != intstr.Int || p.Spec.MaxUnavailable.IntVal != 1 {
				out = append(out, fmt.Sprintf("PodDisruptionBudget %s: maxUnavailable %s, want 1", p.Name, p.Spec.MaxUnavailable.String()))
			}
		case p.Spec.MinAvailable != nil && p.Spec.MaxUnavailable == nil && d.Spec.Replicas != nil:
			if p.Spec.MinAvailable.Type != intstr.Int || p.Spec.MinAvailable.IntVal != *d.Spec.Replicas-1 {
				out = append(out, fmt.Sprintf("PodDisruptionBudget %s: minAvailable %s, want replicas-1", p.Name, p.Spec.MinAvailable.String()))
			}
		default:
			out = append(out, fmt.Sprintf("PodDisruptionBudget %s: give maxUnavailable: 1", p.Name))
		}
	}
	return out
}

// dbPort is the PostgreSQL port of the example Secret's database URL.
func dbPort(b *bundle) (int32, error) {
	c := b.moatContainer()
	if c == nil {
		return 0, errors.New("no container moat")
	}
	for _, e := range c.Env {
		if e.Name != "MOAT_DATABASE_URL" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			continue
		}
		s := b.exampleSecret(e.ValueFrom.SecretKeyRef.Name)
		if s == nil {
			return 0, errors.New("no example Secret for MOAT_DATABASE_URL")
		}
		u, err := url.Parse(secretKeys(s)[e.ValueFrom.SecretKeyRef.Key])
		if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			return 0, fmt.Errorf("example database URL: want postgres://..., got %v", err)
		}
		if u.Port() == "" {
			return 5432, nil
		}
		n, err := strconv.Atoi(u.Port())
		return int32(n), err
	}
	return 0, errors.New("no MOAT_DATABASE_URL from a Secret")
}

type portProto struct {
	port  string
	proto corev1.Protocol
}

func rulePorts(c *corev1.Container, ps []networkingv1.NetworkPolicyPort) ([]portProto, []string) {
	var out []portProto
	var bad []string
	for _, p := range ps {
		proto := corev1.ProtocolTCP
		if p.Protocol != nil {
			proto = *p.Protocol
		}
		if p.Port == nil || p.EndPort != nil {
			bad = append(bad, "a rule names every port or a port range")
			continue
		}
		port := p.Port.String()
		if c != nil && p.Port.Type == intstr.String {
			if n, ok := containerPort(c, *p.Port); ok {
				port = strconv.Itoa(int(n))
			}
		}
		out = append(out, portProto{port, proto})
	}
	return out, bad
}

func openCIDR(peers []networkingv1.NetworkPolicyPeer) bool {
	return slices.ContainsFunc(peers, func(p networkingv1.NetworkPolicyPeer) bool {
		if p.IPBlock == nil {
			return false
		}
		_, n, err := net.ParseCIDR(p.IPBlock.CIDR)
		if err != nil {
			return true
		}
		ones, _ := n.Mask.Size()
		return ones == 0
	})
}

// checkNetworkPolicy holds the default policy: ingress only to the served
// port; egress only to the cluster DNS (53), PostgreSQL and the other
// replicas' served port (a session's calls routed to its replica).
func checkNetworkPolicy(b *bundle) []string {
	c := b.moatContainer()
	port, err := servePort(b)
	if err != nil {
		return []string{err.Error()}
	}
	pg, err := dbPort(b)
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	nps := only[*networkingv1.NetworkPolicy](b, true)
	if len(nps) != 1 {
		return []string{fmt.Sprintf("kustomization.yaml applies %d NetworkPolicies, want the one default policy", len(nps))}
	}
	np := nps[0]
	if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) || !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
		out = append(out, fmt.Sprintf("NetworkPolicy %s: policyTypes %v, want Ingress and Egress", np.Name, np.Spec.PolicyTypes))
	}
	if len(np.Spec.Ingress) == 0 {
		out = append(out, fmt.Sprintf("NetworkPolicy %s: no ingress rule, the served port is closed", np.Name))
	}
	served := []portProto{{strconv.Itoa(int(port)), corev1.ProtocolTCP}}
	for i, r := range np.Spec.Ingress {
		ps, bad := rulePorts(c, r.Ports)
		out = append(out, bad...)
		if !slices.Equal(ps, served) {
			out = append(out, fmt.Sprintf("NetworkPolicy %s: ingress[%d] opens %v, want only %v", np.Name, i, ps, served))
		}
	}
	dns := []portProto{{"53", corev1.ProtocolUDP}, {"53", corev1.ProtocolTCP}}
	postgres := []portProto{{strconv.Itoa(int(pg)), corev1.ProtocolTCP}}
	var sawDNS, sawPG, sawPeers int
	for i, r := range np.Spec.Egress {
		ps, bad := rulePorts(c, r.Ports)
		out = append(out, bad...)
		if len(r.To) == 0 || openCIDR(r.To) {
			out = append(out, fmt.Sprintf("NetworkPolicy %s: egress[%d] goes to every address", np.Name, i))
			continue
		}
		switch {
		case slices.Equal(sortPorts(ps), sortPorts(dns)):
			sawDNS++
			for _, p := range r.To {
				if p.PodSelector == nil || p.PodSelector.MatchLabels["k8s-app"] != "kube-dns" || p.NamespaceSelector == nil {
					out = append(out, fmt.Sprintf("NetworkPolicy %s: egress[%d] opens port 53 to something other than kube-dns in its namespace", np.Name, i))
				}
			}
		case slices.Equal(ps, postgres):
			sawPG++
		case slices.Equal(ps, served):
			sawPeers++
			for _, p := range r.To {
				if p.PodSelector == nil || p.NamespaceSelector != nil || p.PodSelector.MatchLabels["app.kubernetes.io/component"] != "server" {
					out = append(out, fmt.Sprintf("NetworkPolicy %s: egress[%d] opens the served port to something other than the moat server pods of its namespace", np.Name, i))
				}
			}
		default:
			out = append(out, fmt.Sprintf("NetworkPolicy %s: egress[%d] opens %v; the default policy allows only DNS %v and PostgreSQL %v (add targets in a second policy)", np.Name, i, ps, dns, postgres))
		}
	}
	if sawDNS != 1 || sawPG != 1 || sawPeers > 1 {
		out = append(out, fmt.Sprintf("NetworkPolicy %s: %d DNS, %d PostgreSQL and %d replica egress rules, want one of each (at most one to the replicas)", np.Name, sawDNS, sawPG, sawPeers))
	}
	return out
}

func sortPorts(ps []portProto) []portProto {
	ps = slices.Clone(ps)
	slices.SortFunc(ps, func(a, b portProto) int { return strings.Compare(a.port+string(a.proto), b.port+string(b.proto)) })
	return ps
}

// checkExampleNetworkPolicy holds the examples: they only add egress to
// named addresses and ports.
func checkExampleNetworkPolicy(b *bundle) []string {
	var out []string
	n := 0
	for _, m := range b.manifests {
		np, ok := m.obj.(*networkingv1.NetworkPolicy)
		if !ok || b.applied(m) {
			continue
		}
		n++
		if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}) || len(np.Spec.Ingress) > 0 {
			out = append(out, fmt.Sprintf("%v: an added policy must be egress only (policyTypes [Egress]), got %v", m, np.Spec.PolicyTypes))
		}
		for i, r := range np.Spec.Egress {
			_, bad := rulePorts(nil, r.Ports)
			out = append(out, bad...)
			if len(r.Ports) == 0 || len(r.To) == 0 || openCIDR(r.To) {
				out = append(out, fmt.Sprintf("%v: egress[%d] must name its addresses and ports", m, i))
			}
		}
	}
	if n == 0 {
		out = append(out, "no example NetworkPolicy for granted http targets")
	}
	return out
}

// serverConfig parses the ConfigMap's server config with the server's own
// loader. The files the config names inside mounted ConfigMaps and Secrets
// (the metrics token, a profile) are written into a temporary root from
// the ConfigMap and the example Secret, and the config's paths re-rooted
// there, so the loader reads what the pod would.
func serverConfig(b *bundle) (server.Config, error) {
	d, c := b.deployment(), b.moatContainer()
	if c == nil {
		return server.Config{}, errors.New("Deployment: no container named moat")
	}
	p, err := configPath(c)
	if err != nil {
		return server.Config{}, err
	}
	ps := d.Spec.Template.Spec
	_, cmName, key, ok := mountedFile(ps, c, p)
	cm := b.configMap(cmName)
	if !ok || cm == nil {
		return server.Config{}, fmt.Errorf("--config %s: not in an applied ConfigMap", p)
	}
	data := cm.Data[key]
	root, err := os.MkdirTemp("", "moat-deploy-test-")
	if err != nil {
		return server.Config{}, err
	}
	defer os.RemoveAll(root)
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(data), &doc); err != nil {
		return server.Config{}, fmt.Errorf("ConfigMap %s key %s: %w", cmName, key, err)
	}
	var walkErr error
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if n.Kind == yaml.ScalarNode && strings.HasPrefix(n.Value, "/") {
			if kind, name, k, ok := mountedFile(ps, c, n.Value); ok {
				var content string
				var found bool
				if kind == "configmap" {
					if m := b.configMap(name); m != nil {
						content, found = m.Data[k]
					}
				} else if s := b.exampleSecret(name); s != nil {
					content, found = secretKeys(s)[k]
				}
				if !found {
					walkErr = errors.Join(walkErr, fmt.Errorf("server config names %s, but %s %s has no key %s", n.Value, kind, name, k))
					return
				}
				dst := filepath.Join(root, n.Value)
				if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
					walkErr = errors.Join(walkErr, err)
				} else if err := os.WriteFile(dst, []byte(content), 0o600); err != nil {
					walkErr = errors.Join(walkErr, err)
				}
				n.Value = dst
			}
		}
		for _, ch := range n.Content {
			walk(ch)
		}
	}
	walk(&doc)
	if walkErr != nil {
		return server.Config{}, walkErr
	}
	rerooted, err := yaml.Marshal(&doc)
	if err != nil {
		return server.Config{}, err
	}
	cfg, err := server.ParseConfig(fmt.Sprintf("ConfigMap %s key %s", cmName, key), rerooted)
	if err != nil {
		return server.Config{}, err
	}
	cfg.Metrics.TokenFile = strings.TrimPrefix(cfg.Metrics.TokenFile, root)
	cfg.CodeKeyFile = strings.TrimPrefix(cfg.CodeKeyFile, root)
	cfg.Media.URLKeyFile = strings.TrimPrefix(cfg.Media.URLKeyFile, root)
	return cfg, nil
}

// Headroom and margins the pod needs beyond what the config bounds.
const (
	// serverOverhead is what the server holds besides guests' memory: the
	// Go heap, compiled code, pools' idle instances, buffers.
	serverOverhead = 512 << 20
	// closeMargin is the time the server takes, after its requests
	// drained, to close modules, hosts and the store.
	closeMargin = 5 * time.Second
)

func checkServerConfig(b *bundle) []string {
	cfg, err := serverConfig(b)
	if err != nil {
		return []string{err.Error()}
	}
	d, c := b.deployment(), b.moatContainer()
	ps := d.Spec.Template.Spec
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }

	port, _ := servePort(b)
	if _, ok := containerPort(c, intstr.FromInt32(port)); !ok {
		bad("server listens on %s, which is no containerPort", cfg.Listen)
	}
	if host, _, _ := net.SplitHostPort(cfg.Listen); host != "" && host != "0.0.0.0" && host != "::" {
		bad("server listens on %s: the kubelet and the Service reach the pod's own address, not %s", cfg.Listen, host)
	}
	if lim, ok := writableDir(ps, c, cfg.DataDir); !ok {
		bad("data_dir %s is not on a writable emptyDir (the root filesystem is read-only)", cfg.DataDir)
	} else if lim != nil && int64(cfg.BuildCacheBytes) >= lim.Value() {
		bad("build_cache_bytes %s is not below the data emptyDir's sizeLimit %s: the kubelet would evict the pod before the cache evicts a build", cfg.BuildCacheBytes, lim.String())
	}
	if cfg.CacheDir != "" {
		if _, ok := writableDir(ps, c, cfg.CacheDir); !ok {
			bad("cache_dir %s is not on a writable emptyDir", cfg.CacheDir)
		}
	}
	// moat serve makes sessions.dir at start and refuses to start
	// without it (the image's first run found it on the read-only root).
	if dir := cfg.SessionsDir(); dir != "" {
		if _, ok := writableDir(ps, c, dir); !ok {
			bad("sessions.dir %s is not on a writable emptyDir: moat serve cannot make it on the read-only root and refuses to start", dir)
		}
	}
	tmp := "/tmp"
	for _, e := range c.Env {
		if e.Name == "TMPDIR" {
			tmp = e.Value
		}
	}
	if _, ok := writableDir(ps, c, tmp); !ok {
		bad("TMPDIR %s (moat serve's scratch) is not on a writable emptyDir", tmp)
	}
	if cfg.Metrics.TokenFile == "" {
		bad("metrics.token_file is not set: /metrics would answer 403 to everyone")
	} else if kind, _, _, ok := mountedFile(ps, c, cfg.Metrics.TokenFile); !ok || kind != "secret" {
		bad("metrics.token_file %s is not a file of a mounted Secret", cfg.Metrics.TokenFile)
	}
	if cfg.CodeKeyFile == "" {
		bad("code_key_file is not set: each replica would compile every module itself, at every change and every restart")
	} else if kind, _, _, ok := mountedFile(ps, c, cfg.CodeKeyFile); !ok || kind != "secret" {
		bad("code_key_file %s is not a file of a mounted Secret", cfg.CodeKeyFile)
	}
	if cfg.Media.URLKeyFile == "" {
		bad("media.url_key_file is not set: a signed media URL one replica gives out would be refused by the others")
	} else if kind, _, _, ok := mountedFile(ps, c, cfg.Media.URLKeyFile); !ok || kind != "secret" {
		bad("media.url_key_file %s is not a file of a mounted Secret", cfg.Media.URLKeyFile)
	}
	if cfg.Piston.Enabled {
		bad("piston.enabled: the Piston routes take no credentials; keep them off in a cluster")
	}

	// The Service's names must pass the front door's Host check.
	for _, s := range only[*corev1.Service](b, true) {
		for _, name := range []string{s.Name, s.Name + "." + s.Namespace, s.Name + "." + s.Namespace + ".svc"} {
			if !slices.Contains(cfg.HTTP.AllowedHosts, name) {
				bad("http.allowed_hosts lacks %s: requests through the Service would be refused (403 forbidden_host)", name)
			}
		}
	}

	// Shutdown: the preStop sleep, then shutdown_timeout for the requests
	// in flight, then closing; the kubelet must not SIGKILL before.
	var sleep int64
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
		sleep = c.Lifecycle.PreStop.Sleep.Seconds
	} else {
		bad("container moat: no preStop sleep; the endpoint may still get requests after SIGTERM closed the listener")
	}
	need := time.Duration(sleep)*time.Second + time.Duration(cfg.ShutdownTimeout) + closeMargin
	if ps.TerminationGracePeriodSeconds == nil || time.Duration(*ps.TerminationGracePeriodSeconds)*time.Second < need {
		bad("terminationGracePeriodSeconds %v is shorter than preStop %ds + shutdown_timeout %s + %s to close: in-flight requests would be killed",
			ptrString(ps.TerminationGracePeriodSeconds), sleep, cfg.ShutdownTimeout, closeMargin)
	}
	if cfg.ShutdownTimeout < cfg.Limits.InvocationTimeout {
		bad("shutdown_timeout %s is shorter than limits.invocation_timeout %s", cfg.ShutdownTimeout, cfg.Limits.InvocationTimeout)
	}

	// Memory: without root, moat has no backstop cgroup of its own; the
	// pod's limit is the backstop, and must hold every admitted
	// invocation and run at its ceiling at once.
	var modMem, execMem int64
	for _, name := range append([]string{cfg.Profile}, mapValues(cfg.Profiles)...) {
		p, err := policy.LoadProfile(name)
		if err != nil {
			bad("profile %s: %v", name, err)
			continue
		}
		modMem = max(modMem, grantMemory(p))
		execMem = max(execMem, int64(p.ExecMaxima().Memory))
	}
	want := int64(cfg.Admission.MaxInvocations)*modMem + int64(cfg.Admission.MaxRuns)*execMem + serverOverhead
	if lim, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok || lim.Value() < want {
		bad("memory limit %s is below %d invocations × %d MiB + %d runs × %d MiB + %d MiB for the server (%d MiB): lower admission.max_invocations/max_runs or raise the limit",
			lim.String(), cfg.Admission.MaxInvocations, modMem>>20, cfg.Admission.MaxRuns, execMem>>20, serverOverhead>>20, want>>20)
	}
	return out
}

func ptrString(p *int64) string {
	if p == nil {
		return "(unset: 30)"
	}
	return strconv.FormatInt(*p, 10)
}

func mapValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// grantMemory is the most linear memory any grant of p lets one instance
// have.
func grantMemory(p *policy.Profile) int64 {
	def := int64(host.DefaultLimits.MemoryLimitPages) * 65536
	var most int64
	var walk func(g *policy.Grant)
	walk = func(g *policy.Grant) {
		if g == nil {
			return
		}
		m := int64(g.Limits.Memory)
		if m == 0 {
			m = def
		}
		most = max(most, m)
		walk(g.Trusted)
	}
	walk(p.Default)
	for _, g := range p.Modules {
		walk(&g)
	}
	for _, g := range p.Keys {
		walk(&g)
	}
	if most == 0 {
		most = def
	}
	return most
}

// containerfileStage is one FROM ... stage, its instructions with line
// continuations joined.
type containerfileStage struct {
	from  string
	lines []string
}

func parseContainerfile(s string) []containerfileStage {
	var stages []containerfileStage
	s = strings.ReplaceAll(s, "\\\n", " ")
	for line := range strings.SplitSeq(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if rest, ok := strings.CutPrefix(line, "FROM "); ok {
			stages = append(stages, containerfileStage{from: rest})
			continue
		}
		if len(stages) > 0 {
			stages[len(stages)-1].lines = append(stages[len(stages)-1].lines, line)
		}
	}
	return stages
}

// npmPackage is the package part of a path inside node_modules
// ("@scope/name/dist/x.wasm" → "@scope/name").
func npmPackage(p string) string {
	parts := strings.SplitN(p, "/", 3)
	if strings.HasPrefix(p, "@") && len(parts) >= 2 {
		return parts[0] + "/" + parts[1]
	}
	return parts[0]
}

// checkContainerfile holds the image to the Deployment and to the build:
// the uid, the binary's path, CGO_ENABLED=0, every source directory the
// build needs, and the interpreters provisioned by moat toolchains install
// (checkImageToolchains).
func checkContainerfile(b *bundle) []string {
	stages := parseContainerfile(b.containerfile)
	if len(stages) < 2 {
		return []string{"Containerfile: want a multi-stage build"}
	}
	var out []string
	bad := func(format string, args ...any) { out = append(out, "Containerfile: "+fmt.Sprintf(format, args...)) }
	final := &stages[len(stages)-1]
	d, c := b.deployment(), b.moatContainer()
	if c != nil {
		psc := d.Spec.Template.Spec.SecurityContext
		uid := cmpOr(c.SecurityContext.RunAsUser, psc.RunAsUser)
		gid := cmpOr(c.SecurityContext.RunAsGroup, psc.RunAsGroup)
		if uid == nil || gid == nil || !slices.Contains(final.lines, fmt.Sprintf("USER %d:%d", *uid, *gid)) {
			bad("the final stage must say USER %s:%s, the Deployment's runAsUser:runAsGroup", ptrString(uid), ptrString(gid))
		}
		if len(c.Command) > 0 && !slices.ContainsFunc(final.lines, func(l string) bool {
			return strings.HasPrefix(l, "COPY ") && (strings.HasSuffix(l, " "+c.Command[0]) || strings.HasSuffix(l, " "+path.Dir(c.Command[0])+"/"))
		}) {
			bad("the final stage copies nothing to %s, the Deployment's command", c.Command[0])
		}
	}

	// The build stage: CGO_ENABLED=0, and a COPY of every directory of
	// this module that the binaries' packages live in.
	var build *containerfileStage
	for i := range stages {
		if slices.ContainsFunc(stages[i].lines, func(l string) bool { return strings.Contains(l, "go build") }) {
			build = &stages[i]
		}
	}
	if build == nil {
		return append(out, "Containerfile: no stage runs go build")
	}
	if !slices.ContainsFunc(build.lines, func(l string) bool {
		return (strings.HasPrefix(l, "ENV ") || strings.HasPrefix(l, "RUN ")) && strings.Contains(l, "CGO_ENABLED=0")
	}) {
		bad("the build stage must set CGO_ENABLED=0 (moat is built without cgo)")
	}
	copied := map[string]bool{}
	for _, l := range build.lines {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == "COPY" && !strings.HasPrefix(f[1], "--") {
			for _, src := range f[1 : len(f)-1] {
				copied[strings.Trim(src, "/")] = true
			}
		}
	}
	list, err := imageDeps(filepath.Join(b.dir, ".."))
	if err != nil {
		return append(out, err.Error())
	}
	const mod = "github.com/moat-sandbox/moat"
	for line := range strings.SplitSeq(strings.TrimSpace(list), "\n") {
		pkg, m, _ := strings.Cut(line, " ")
		if m != mod {
			continue
		}
		top, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(pkg, mod), "/"), "/")
		if !copied[top] {
			bad("the build needs %s (package %s), which no COPY brings in", top+"/", pkg)
			copied[top] = true // once per directory
		}
	}

	out = append(out, checkImageToolchains(stages, build, final)...)
	return out
}

var (
	npmInstall  = regexp.MustCompile(`\bnpm\s+(install|i|ci|add)\b`)
	goBuildMoat = regexp.MustCompile(`go build -o (\S+) \./cmd/moat(\s|$)`)
)

// checkImageToolchains holds the image's interpreter WASMs to the one
// mechanism that provisions them everywhere: the build stage runs the moat
// it built, `moat toolchains install --no-apt --dir D LANG...`, so the
// versions and checksums are package toolchains' pins (never a second
// list here that could drift), for every language whose interpreter the
// image carries (those languages/python and languages/ruby read), into
// the D the final stage copies to its $MOAT_TOOLCHAINS. No npm: a second
// mechanism would fetch without the pinned checksums.
func checkImageToolchains(stages []containerfileStage, build, final *containerfileStage) []string {
	var out []string
	bad := func(format string, args ...any) { out = append(out, "Containerfile: "+fmt.Sprintf(format, args...)) }
	for _, st := range stages {
		for _, l := range st.lines {
			if f := strings.Fields(l); len(f) > 0 && f[0] == "RUN" && npmInstall.MatchString(l) {
				bad("%q installs with npm: provision with `moat toolchains install` (pinned versions, checked sha512)", l)
			}
		}
	}
	// The binary the build stage builds from ./cmd/moat.
	var bin string
	for _, l := range build.lines {
		if m := goBuildMoat.FindStringSubmatch(l); m != nil {
			bin = m[1]
		}
	}
	if bin == "" {
		return append(out, "Containerfile: the build stage builds no ./cmd/moat (go build -o BIN ./cmd/moat)")
	}
	var args []string
	for _, l := range build.lines {
		f := strings.Fields(l)
		if len(f) >= 4 && f[0] == "RUN" && f[1] == bin && f[2] == "toolchains" && f[3] == "install" {
			args = f[4:]
		}
	}
	if args == nil {
		return append(out, fmt.Sprintf("Containerfile: the build stage must provision the interpreters with RUN %s toolchains install --no-apt --no-warm --dir DIR LANG...", bin))
	}
	dir, noApt, noWarm := "", false, false
	var langs []string
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "&&" || a == ";":
			i = len(args)
		case a == "--no-apt":
			noApt = true
		case a == "--no-warm":
			noWarm = true
		case a == "--dir" && i+1 < len(args):
			i++
			dir = args[i]
		case strings.HasPrefix(a, "--dir="):
			dir = strings.TrimPrefix(a, "--dir=")
		case strings.HasPrefix(a, "-"):
			bad("toolchains install: flag %s is not one this check knows (--no-apt, --no-warm, --dir)", a)
		default:
			langs = append(langs, a)
		}
	}
	if !noApt {
		bad("toolchains install must say --no-apt: the compilers' files come from their own stage, and apt-get in the build stage would install into it")
	}
	if !noWarm {
		bad("toolchains install must say --no-warm: a warm-up's state would be root's, which moat as uid 65532 refuses (moatdir.OwnedDir)")
	}
	if dir == "" {
		bad("toolchains install must say --dir: where the final stage copies the toolchains from")
	}
	for _, need := range []string{python.NPMPackage, ruby.NPMPackage} {
		pkg := npmPackage(need)
		lang := ""
		for _, p := range toolchains.Provisions() {
			for _, n := range p.NPM {
				if n.Name == pkg {
					lang = p.Language
				}
			}
		}
		switch {
		case lang == "":
			bad("package toolchains provisions no %s (which %s reads)", pkg, need)
		case !slices.Contains(langs, lang):
			bad("toolchains install must name %s (it provisions %s, which the image's %s needs); names %v", lang, pkg, lang, langs)
		}
	}
	// The final stage: COPY --from=<build> DIR X, and MOAT_TOOLCHAINS=X.
	var dest string
	for _, l := range final.lines {
		if f := strings.Fields(l); len(f) == 4 && f[0] == "COPY" && strings.HasPrefix(f[1], "--from=") && strings.TrimSuffix(f[2], "/") == strings.TrimSuffix(dir, "/") {
			dest = strings.TrimSuffix(f[3], "/")
		}
	}
	if dir != "" && dest == "" {
		bad("the final stage copies nothing from %s, where toolchains install put the interpreters", dir)
	} else if dest != "" && !slices.ContainsFunc(final.lines, func(l string) bool {
		return strings.HasPrefix(l, "ENV ") && slices.Contains(strings.Fields(l), "MOAT_TOOLCHAINS="+dest)
	}) {
		bad("the final stage must set ENV MOAT_TOOLCHAINS=%s, where it copies the toolchains", dest)
	}
	return out
}

// imageDeps lists the packages the image builds (go list -deps), once per
// test binary.
var imageDeps = func() func(root string) (string, error) {
	var mu sync.Mutex
	cache := map[string]string{}
	return func(root string) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		if s, ok := cache[root]; ok {
			return s, nil
		}
		goBin, err := exec.LookPath("go")
		if err != nil {
			return "", errors.New("go is not on PATH: cannot list the packages the image builds")
		}
		cmd := exec.Command(goBin, "list", "-deps", "-f", "{{.ImportPath}} {{.Module}}", "./cmd/moat", "./cmd/moat-confine", "./languages/python/internal/extractstdlib")
		cmd.Dir = root
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("go list: %v: %s", err, stderr.String())
		}
		cache[root] = string(out)
		return string(out), nil
	}
}()

// checkMigrate: on PostgreSQL moat serve refuses an older schema unless
// migrate: auto, so the Deployment must upgrade it: an init container
// running moat migrate with the server's own --config and database URL
// (or the config says migrate: auto).
func checkMigrate(b *bundle) []string {
	d, c := b.deployment(), b.moatContainer()
	if d == nil || c == nil {
		return []string{"want one Deployment with a container named moat"}
	}
	cfg, err := serverConfig(b)
	if err != nil {
		return []string{err.Error()}
	}
	if cfg.Migrate == "auto" {
		return nil
	}
	want, err := configPath(c)
	if err != nil {
		return []string{err.Error()}
	}
	for _, ic := range d.Spec.Template.Spec.InitContainers {
		argv := append(append([]string{}, ic.Command...), ic.Args...)
		if len(argv) < 2 || path.Base(argv[0]) != "moat" || argv[1] != "migrate" {
			continue
		}
		var out []string
		if i := slices.Index(argv, "--config"); i < 0 || i+1 >= len(argv) || argv[i+1] != want {
			out = append(out, fmt.Sprintf("init container %s runs %q, not with moat serve's --config %s", ic.Name, argv, want))
		}
		if ic.Image != c.Image {
			out = append(out, fmt.Sprintf("init container %s runs image %q, moat serve %q: the migration must be the new release's", ic.Name, ic.Image, c.Image))
		}
		same := func(e corev1.EnvVar) bool {
			return e.Name == server.EnvDatabaseURL
		}
		i, j := slices.IndexFunc(ic.Env, same), slices.IndexFunc(c.Env, same)
		if (i < 0) != (j < 0) || i >= 0 && fmt.Sprint(ic.Env[i]) != fmt.Sprint(c.Env[j]) {
			out = append(out, fmt.Sprintf("init container %s does not get $%s as moat serve does: it would migrate another database", ic.Name, server.EnvDatabaseURL))
		}
		return out
	}
	return []string{"the Deployment neither runs moat migrate in an init container nor sets migrate: auto: new pods on PostgreSQL refuse the older schema"}
}
