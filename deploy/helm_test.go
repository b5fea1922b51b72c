package deploy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"text/template"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	k8syaml "sigs.k8s.io/yaml"
)

// chartDir is the Helm chart, relative to deploy/.
const chartDir = "helm/moat"

// helmFuncs are the functions the chart's templates may call, with Helm's
// semantics (helm.sh/helm/v3/pkg/engine: toYaml trims the final newline;
// nindent is a newline and indent). A template calling anything else
// fails to parse here: the chart stays inside what this renderer and
// Helm agree on, and TestChartMatchesHelm compares the two where the
// helm binary is at hand.
var helmFuncs = template.FuncMap{
	"toYaml": func(v any) (string, error) {
		b, err := k8syaml.Marshal(v)
		return strings.TrimSuffix(string(b), "\n"), err
	},
	"toJson": func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	},
	"indent": func(n int, s string) string {
		pad := strings.Repeat(" ", n)
		return pad + strings.ReplaceAll(s, "\n", "\n"+pad)
	},
	"nindent": func(n int, s string) string {
		pad := strings.Repeat(" ", n)
		return "\n" + pad + strings.ReplaceAll(s, "\n", "\n"+pad)
	},
	"quote": func(s any) string { return fmt.Sprintf("%q", fmt.Sprint(s)) },
}

// mergeValues overlays over on base, map by map, as helm --set and -f do.
func mergeValues(base, over map[string]any) map[string]any {
	out := maps.Clone(base)
	for k, v := range over {
		if bm, ok := out[k].(map[string]any); ok {
			if om, ok := v.(map[string]any); ok {
				out[k] = mergeValues(bm, om)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// renderChart renders every template of the chart with values.yaml
// overlaid by over (JSON semantics, as Helm reads values: numbers are
// float64), for a release in namespace. It returns each template's
// output by file name.
func renderChart(t *testing.T, namespace string, over map[string]any) map[string]string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := k8syaml.Unmarshal(data, &values); err != nil {
		t.Fatalf("values.yaml: %v", err)
	}
	if over != nil {
		// Through JSON, so the overrides have the types values.yaml's do.
		js, _ := json.Marshal(over)
		var o map[string]any
		if err := json.Unmarshal(js, &o); err != nil {
			t.Fatal(err)
		}
		values = mergeValues(values, o)
	}
	top := map[string]any{
		"Values":  values,
		"Release": map[string]any{"Name": "moat", "Namespace": namespace, "Service": "Helm"},
		"Chart":   map[string]any{"Name": "moat"},
	}
	files, err := filepath.Glob(filepath.Join(chartDir, "templates", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no templates in %s: %v", chartDir, err)
	}
	out := map[string]string{}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		tpl, err := template.New(filepath.Base(f)).Option("missingkey=error").Funcs(helmFuncs).Parse(string(src))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		var buf bytes.Buffer
		if err := tpl.Execute(&buf, top); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[filepath.Base(f)] = buf.String()
	}
	return out
}

// addedPolicies are the templates that render a policy added to the
// default one (like networkpolicy-egress.example.yaml), which the checks
// hold as such rather than as the one applied default.
var addedPolicies = map[string]bool{"networkpolicy-egress.yaml": true}

// renderedBundle is the Kustomize bundle with its applied objects
// replaced by what the chart renders: the checks of deploy_test.go then
// run on the chart's output unchanged. The examples stay (the Secret's
// keys, an added egress policy), moved to the release's namespace.
func renderedBundle(t *testing.T, namespace string, over map[string]any) *bundle {
	t.Helper()
	base := loadBundle(t, ".")
	nb := &bundle{dir: base.dir, containerfile: base.containerfile, kustFile: chartDir + "/templates/kustomization.yaml",
		kust: &kustomization{APIVersion: kustomizationGVK.GroupVersion().String(), Kind: kustomizationGVK.Kind}}
	for _, m := range base.manifests {
		if !base.applied(m) {
			obj := m.obj.DeepCopyObject()
			acc, err := metaOf(obj)
			if err != nil {
				t.Fatal(err)
			}
			acc.SetNamespace(namespace)
			nb.manifests = append(nb.manifests, manifest{file: m.file, doc: m.doc, obj: obj})
		}
	}
	rendered := renderChart(t, namespace, over)
	for _, name := range slices.Sorted(maps.Keys(rendered)) {
		file := chartDir + "/templates/" + name
		if addedPolicies[name] {
			file = chartDir + "/added/" + name
		}
		docs := splitDocs([]byte(rendered[name]))
		for i, doc := range docs {
			obj, k, err := decodeDoc(doc)
			switch {
			case err != nil:
				t.Errorf("%s#%d rendered: %v\n%s", name, i, err, doc)
				continue
			case k != nil:
				t.Errorf("%s#%d: the chart renders a Kustomization", name, i)
				continue
			}
			nb.manifests = append(nb.manifests, manifest{file: file, doc: i, obj: obj})
		}
		if len(docs) > 0 && !addedPolicies[name] {
			nb.kust.Resources = append(nb.kust.Resources, name)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return nb
}

// runChecks runs every check of deploy_test.go on b.
func runChecks(t *testing.T, b *bundle) {
	t.Helper()
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			for _, p := range c.fn(b) {
				t.Error(p)
			}
		})
	}
}

// objKey names an object for matching the chart's to the base's.
func objKey(o runtime.Object) string {
	acc, _ := metaOf(o)
	return o.GetObjectKind().GroupVersionKind().Kind + "/" + acc.GetNamespace() + "/" + acc.GetName()
}

// TestChartEqualsKustomize: with values.yaml's defaults, the chart renders
// exactly the objects `kubectl apply -k deploy/kubernetes` applies, the
// kustomization's image set, field for field after strict decoding (the
// comments may differ, the objects may not).
func TestChartEqualsKustomize(t *testing.T) {
	base := loadBundle(t, ".")
	want := map[string]runtime.Object{}
	for _, m := range base.manifests {
		if !base.applied(m) {
			continue
		}
		obj := m.obj.DeepCopyObject()
		if d, ok := obj.(*appsv1.Deployment); ok {
			setImages(d, base.kust)
		}
		want[objKey(obj)] = obj
	}
	got := map[string]runtime.Object{}
	b := renderedBundle(t, "moat", nil)
	for _, m := range b.manifests {
		if b.applied(m) {
			got[objKey(m.obj)] = m.obj
		} else if _, ok := m.obj.(*networkingv1.NetworkPolicy); ok && strings.HasPrefix(m.file, chartDir) {
			t.Errorf("%v: with the defaults the chart renders no added egress policy", m)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		g, ok := got[k]
		if !ok {
			t.Errorf("%s: in deploy/kubernetes, not rendered by the chart", k)
			continue
		}
		if !equality.Semantic.DeepEqual(g, want[k]) {
			gj, _ := k8syaml.Marshal(g)
			wj, _ := k8syaml.Marshal(want[k])
			t.Errorf("%s: the chart renders\n%s\ndeploy/kubernetes applies\n%s", k, gj, wj)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: rendered by the chart, not in deploy/kubernetes", k)
		}
	}
}

// setImages does what kustomize's images: does to a Deployment.
func setImages(d *appsv1.Deployment, k *kustomization) {
	ps := &d.Spec.Template.Spec
	for _, img := range k.Images {
		for _, cs := range [][]corev1.Container{ps.InitContainers, ps.Containers} {
			for i := range cs {
				if cs[i].Image == img.Name {
					cs[i].Image = img.NewName + ":" + img.NewTag
				}
			}
		}
	}
}

// TestChartValues renders the chart with every value an operator sets
// changed, decodes the output strictly and runs every check of
// deploy_test.go on it, then holds each value to where it must land.
func TestChartValues(t *testing.T) {
	over := map[string]any{
		"image":        map[string]any{"repository": "registry.internal/moat", "tag": "1.2.3", "pullPolicy": "Always"},
		"replicas":     5,
		"secretName":   "moat-prod",
		"allowedHosts": []string{"moat.example.com"},
		"languages":    map[string]any{"warm": []string{"python", "ruby"}},
		"networkPolicy": map[string]any{
			"postgres": map[string]any{"port": 6432, "to": []any{map[string]any{"ipBlock": map[string]any{"cidr": "192.0.2.10/32"}}}},
			"egressTargets": []any{map[string]any{
				"to":    []any{map[string]any{"ipBlock": map[string]any{"cidr": "203.0.113.0/24"}}},
				"ports": []any{map[string]any{"port": 443, "protocol": "TCP"}},
			}},
		},
	}
	b := renderedBundle(t, "sandbox", over)
	// The operator's Secret (secret.example.yaml's keys) is named as the
	// values say, and its database URL goes to the values' port.
	if s := b.exampleSecret("moat"); s != nil {
		s.Name = "moat-prod"
		for k, v := range s.StringData {
			s.StringData[k] = strings.Replace(v, ":5432/", ":6432/", 1)
		}
	}
	runChecks(t, b)

	d, c := b.deployment(), b.moatContainer()
	if d == nil || c == nil {
		t.Fatal("no Deployment with a container moat")
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 5 {
		t.Errorf("replicas %v, want 5", d.Spec.Replicas)
	}
	if c.Image != "registry.internal/moat:1.2.3" || c.ImagePullPolicy != "Always" {
		t.Errorf("image %s (%s), want registry.internal/moat:1.2.3 (Always)", c.Image, c.ImagePullPolicy)
	}
	cfg, err := serverConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(cfg.HTTP.AllowedHosts, "moat.example.com") || !slices.Contains(cfg.HTTP.AllowedHosts, "moat.sandbox.svc") {
		t.Errorf("allowed_hosts %q, want the values' and the release namespace's names", cfg.HTTP.AllowedHosts)
	}
	if !slices.Equal(cfg.Languages.Warm, []string{"python", "ruby"}) {
		t.Errorf("languages.warm %q, want [python ruby]", cfg.Languages.Warm)
	}
	var added int
	for _, m := range b.manifests {
		if np, ok := m.obj.(*networkingv1.NetworkPolicy); ok && strings.HasPrefix(m.file, chartDir+"/added/") {
			added++
			if len(np.Spec.Egress) != 1 || np.Spec.Egress[0].To[0].IPBlock == nil || np.Spec.Egress[0].To[0].IPBlock.CIDR != "203.0.113.0/24" {
				t.Errorf("%v: egress %+v, want the values' target", m, np.Spec.Egress)
			}
		}
	}
	if added != 1 {
		t.Errorf("%d added egress policies rendered, want 1", added)
	}
}

// TestChartMatchesHelm renders the chart with Helm itself, where it is at
// hand ($MOAT_HELM or helm on PATH; `go install
// helm.sh/helm/v3/cmd/helm@v3.16.4` builds it, kept out of moat's module),
// and requires the same objects as this test's renderer: the renderer's
// semantics are Helm's for what the chart uses.
func TestChartMatchesHelm(t *testing.T) {
	helm := os.Getenv("MOAT_HELM")
	if helm == "" {
		var err error
		if helm, err = exec.LookPath("helm"); err != nil {
			t.Skip("helm is not installed (not a Debian package; go install helm.sh/helm/v3/cmd/helm@v3.16.4 and set MOAT_HELM): the renderer's output is checked, not compared with Helm's")
		}
	}
	for _, tc := range []struct {
		name string
		set  []string
		over map[string]any
	}{
		{"defaults", nil, nil},
		{"values", []string{"replicas=5", "image.tag=1.2.3", "languages.warm={python,ruby}", "allowedHosts={moat.example.com}"},
			map[string]any{"replicas": 5, "image": map[string]any{"tag": "1.2.3"}, "languages": map[string]any{"warm": []string{"python", "ruby"}}, "allowedHosts": []string{"moat.example.com"}}},
		{"egress targets", []string{"networkPolicy.egressTargets[0].to[0].ipBlock.cidr=203.0.113.0/24", "networkPolicy.egressTargets[0].ports[0].port=443"},
			map[string]any{"networkPolicy": map[string]any{"egressTargets": []any{map[string]any{
				"to": []any{map[string]any{"ipBlock": map[string]any{"cidr": "203.0.113.0/24"}}}, "ports": []any{map[string]any{"port": 443}}}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"template", "moat", chartDir, "--namespace", "moat"}
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			out, err := exec.Command(helm, args...).CombinedOutput()
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, out)
			}
			helmObjs := decodeAll(t, out)
			var ours []byte
			r := renderChart(t, "moat", tc.over)
			for _, name := range slices.Sorted(maps.Keys(r)) {
				ours = append(ours, "\n---\n"+r[name]...)
			}
			ourObjs := decodeAll(t, ours)
			for k, o := range ourObjs {
				if h, ok := helmObjs[k]; !ok {
					t.Errorf("%s: rendered here, not by helm", k)
				} else if !equality.Semantic.DeepEqual(h, o) {
					hy, _ := k8syaml.Marshal(h)
					oy, _ := k8syaml.Marshal(o)
					t.Errorf("%s: helm renders\n%s\nthis renderer\n%s", k, hy, oy)
				}
			}
			for k := range helmObjs {
				if _, ok := ourObjs[k]; !ok {
					t.Errorf("%s: rendered by helm, not here", k)
				}
			}
		})
	}
}

func decodeAll(t *testing.T, data []byte) map[string]runtime.Object {
	t.Helper()
	out := map[string]runtime.Object{}
	for i, doc := range splitDocs(data) {
		obj, _, err := decodeDoc(doc)
		if err != nil {
			t.Fatalf("document %d: %v\n%s", i, err, doc)
		}
		out[objKey(obj)] = obj
	}
	return out
}
