package deploytest

import (
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
)

// checkMeta checks names and labels with the API server's own syntax rules.
func checkMeta(t *testing.T, o object) {
	t.Helper()
	m := o.obj.(metav1.Object)
	if m.GetName() == "" {
		t.Errorf("%s: no metadata.name", o)
	}
	for _, msg := range validation.IsDNS1123Label(m.GetName()) {
		t.Errorf("%s: name %q: %s", o, m.GetName(), msg)
	}
	check := func(where string, set map[string]string) {
		for k, v := range set {
			for _, msg := range validation.IsQualifiedName(k) {
				t.Errorf("%s: %s key %q: %s", o, where, k, msg)
			}
			for _, msg := range validation.IsValidLabelValue(v) {
				t.Errorf("%s: %s %s=%q: %s", o, where, k, v, msg)
			}
		}
	}
	check("label", m.GetLabels())
	if d, ok := o.obj.(*appsv1.Deployment); ok {
		check("pod label", d.Spec.Template.Labels)
		for _, c := range d.Spec.Template.Spec.Containers {
			for _, p := range c.Ports {
				for _, msg := range validation.IsValidPortName(p.Name) {
					t.Errorf("%s: container port name %q: %s", o, p.Name, msg)
				}
			}
		}
	}
	if s, ok := o.obj.(*corev1.Service); ok {
		for _, p := range s.Spec.Ports {
			for _, msg := range validation.IsDNS1123Label(p.Name) {
				t.Errorf("%s: port name %q: %s", o, p.Name, msg)
			}
		}
	}
}

// parseArgs reads --name value and --name=value flags.
func parseArgs(t *testing.T, args []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for i := 0; i < len(args); i++ {
		a := strings.TrimLeft(args[i], "-")
		if a == args[i] {
			t.Errorf("args %v: unexpected positional %q", args, args[i])
			continue
		}
		if k, v, ok := strings.Cut(a, "="); ok {
			out[k] = v
			continue
		}
		if i+1 >= len(args) {
			t.Errorf("args %v: %s has no value", args, args[i])
			continue
		}
		out[a] = args[i+1]
		i++
	}
	return out
}

// configMapKeyAt returns the key of ConfigMap cmName that the container sees
// at path, or "" (with an error) when path is not such a file.
func configMapKeyAt(t *testing.T, pod *corev1.PodSpec, c *corev1.Container, path, cmName string) string {
	t.Helper()
	for _, m := range c.VolumeMounts {
		var key string
		switch {
		case m.SubPath != "" && m.MountPath == path:
			key = m.SubPath
		case m.SubPath == "" && filepath.Dir(path) == filepath.Clean(m.MountPath):
			key = filepath.Base(path)
		default:
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name != m.Name {
				continue
			}
			if v.ConfigMap == nil || v.ConfigMap.Name != cmName {
				t.Errorf("volume %s mounted at %s is not ConfigMap %s", v.Name, m.MountPath, cmName)
				return ""
			}
			for _, it := range v.ConfigMap.Items {
				if it.Path == key {
					key = it.Key
				}
			}
			if !m.ReadOnly {
				t.Errorf("config volume mount %s is not readOnly", m.MountPath)
			}
			return key
		}
		t.Errorf("volume mount %s names no volume", m.Name)
		return ""
	}
	t.Errorf("--config %s: no volume mount provides it", path)
	return ""
}

func containerPort(t *testing.T, c *corev1.Container, name string) int32 {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	t.Errorf("container %s has no port %q", c.Name, name)
	return -1
}

// resolvePort is the container port a Service port or probe port reaches
// (named or numbered); 0 when the container has no such port.
func resolvePort(c *corev1.Container, p intstr.IntOrString, servicePort int32) int32 {
	if p.Type == intstr.String {
		for _, cp := range c.Ports {
			if cp.Name == p.StrVal {
				return cp.ContainerPort
			}
		}
		return 0
	}
	n := p.IntVal
	if n == 0 {
		n = servicePort // an unset targetPort is the port
	}
	for _, cp := range c.Ports {
		if cp.ContainerPort == n {
			return n
		}
	}
	return 0
}

func splitHostPort(t *testing.T, key, addr string) (string, int32) {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Errorf("%s %q: %v", key, addr, err)
		return "", -1
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Errorf("%s %q: %v", key, addr, err)
	}
	return host, int32(n)
}

func anyHost(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }

func checkProbe(t *testing.T, c *corev1.Container, name string, p *corev1.Probe, path string, adminPort int32, required bool) {
	t.Helper()
	if p == nil {
		if required {
			t.Errorf("container has no %s", name)
		}
		return
	}
	g := p.HTTPGet
	if g == nil {
		t.Errorf("%s is not an httpGet probe", name)
		return
	}
	if path != "" && g.Path != path {
		t.Errorf("%s path %q, want %q", name, g.Path, path)
	}
	if path == "" && g.Path != "/healthz" && g.Path != "/readyz" {
		t.Errorf("%s path %q, want /healthz or /readyz", name, g.Path)
	}
	if got := resolvePort(c, g.Port, 0); got != adminPort {
		t.Errorf("%s port %s is %d, want the admin port %d", name, g.Port.String(), got, adminPort)
	}
	if g.Scheme != "" && g.Scheme != corev1.URISchemeHTTP {
		t.Errorf("%s scheme %s: the admin server is plain HTTP", name, g.Scheme)
	}
}

func checkSecurity(t *testing.T, pod *corev1.PodSpec, c *corev1.Container) {
	t.Helper()
	ps := pod.SecurityContext
	if ps == nil {
		ps = &corev1.PodSecurityContext{}
	}
	cs := c.SecurityContext
	if cs == nil {
		t.Errorf("container %s has no securityContext", c.Name)
		cs = &corev1.SecurityContext{}
	}
	// The container's settings override the pod's.
	nonRoot := cs.RunAsNonRoot
	if nonRoot == nil {
		nonRoot = ps.RunAsNonRoot
	}
	if nonRoot == nil || !*nonRoot {
		t.Errorf("runAsNonRoot is not true")
	}
	uid := cs.RunAsUser
	if uid == nil {
		uid = ps.RunAsUser
	}
	if uid != nil && *uid == 0 {
		t.Errorf("runAsUser 0")
	}
	if cs.ReadOnlyRootFilesystem == nil || !*cs.ReadOnlyRootFilesystem {
		t.Errorf("readOnlyRootFilesystem is not true")
	}
	if cs.AllowPrivilegeEscalation == nil || *cs.AllowPrivilegeEscalation {
		t.Errorf("allowPrivilegeEscalation is not false")
	}
	if cs.Privileged != nil && *cs.Privileged {
		t.Errorf("container is privileged")
	}
	if cs.Capabilities == nil || !slices.Contains(cs.Capabilities.Drop, "ALL") {
		t.Errorf("capabilities do not drop ALL")
	} else if len(cs.Capabilities.Add) > 0 {
		t.Errorf("capabilities add %v", cs.Capabilities.Add)
	}
	seccomp := cs.SeccompProfile
	if seccomp == nil {
		seccomp = ps.SeccompProfile
	}
	if seccomp == nil || seccomp.Type == corev1.SeccompProfileTypeUnconfined {
		t.Errorf("no seccomp profile (want RuntimeDefault)")
	}
	if pod.HostNetwork || pod.HostPID || pod.HostIPC {
		t.Errorf("pod shares a host namespace")
	}
}

func checkResources(t *testing.T, c *corev1.Container) {
	t.Helper()
	r := c.Resources
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, ok := r.Requests[name]
		if !ok || req.IsZero() {
			t.Errorf("no %s request (the scheduler and, for cpu, the HPA need it)", name)
			continue
		}
		if lim, ok := r.Limits[name]; ok && lim.Cmp(req) < 0 {
			t.Errorf("%s limit %s below request %s", name, lim.String(), req.String())
		}
	}
	if _, ok := r.Limits[corev1.ResourceMemory]; !ok {
		t.Errorf("no memory limit")
	}
}

// graceError: the kubelet's SIGKILL (terminationGracePeriodSeconds, default
// 30s) must come after the relay's drain.period.
func graceError(grace *int64, drain time.Duration) error {
	g := 30 * time.Second
	if grace != nil {
		g = time.Duration(*grace) * time.Second
	}
	if g <= drain {
		return fmt.Errorf("terminationGracePeriodSeconds %v must exceed drain.period %v, or the kubelet kills the relay mid-drain", g, drain)
	}
	return nil
}

func optInt(p *int32) string {
	if p == nil {
		return "unset"
	}
	return strconv.Itoa(int(*p))
}
