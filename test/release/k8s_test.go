package release

import (
	"bytes"
	"errors"
	"io"
	"net"
	"path"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/cmd"
	"github.com/leasectl/leasectl/keys"
	"go.yaml.in/yaml/v3"
)

type k8sObject struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"`
	Spec struct {
		Replicas int `yaml:"replicas"`
		Template struct {
			Spec podSpec `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type podSpec struct {
	TerminationGracePeriodSeconds *int `yaml:"terminationGracePeriodSeconds"`
	SecurityContext               struct {
		RunAsNonRoot bool `yaml:"runAsNonRoot"`
	} `yaml:"securityContext"`
	Containers []container `yaml:"containers"`
	Volumes    []struct {
		Name      string `yaml:"name"`
		ConfigMap *struct {
			Name string `yaml:"name"`
		} `yaml:"configMap"`
	} `yaml:"volumes"`
}

type container struct {
	Name    string   `yaml:"name"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Env     []struct {
		Name  string `yaml:"name"`
		Value string `yaml:"value"`
	} `yaml:"env"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	VolumeMounts   []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

type probe struct {
	HTTPGet *struct {
		Path string    `yaml:"path"`
		Port yaml.Node `yaml:"port"`
	} `yaml:"httpGet"`
}

// TestKubernetesExample checks examples/k8s/poller.yaml: a Deployment of 3
// replicas whose entrypoint is leasectl run (its command line parsed by
// leasectl's own flags), the metrics port, liveness and readiness probes on
// /healthz and /readyz of that port, a termination grace period that covers
// --grace, and a keys file mounted where LEASECTL_KEYS points that passes
// keys lint.
func TestKubernetesExample(t *testing.T) {
	dec := yaml.NewDecoder(bytes.NewReader([]byte(readFile(t, "examples/k8s/poller.yaml"))))
	objects := map[string]k8sObject{}
	for {
		var o k8sObject
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		objects[o.Kind+"/"+o.Metadata.Name] = o
	}
	d, ok := objects["Deployment/poller"]
	if !ok {
		t.Fatalf("no Deployment poller in %v", objects)
	}
	if d.Spec.Replicas != 3 {
		t.Errorf("replicas: %d, want 3", d.Spec.Replicas)
	}
	pod := d.Spec.Template.Spec
	if !pod.SecurityContext.RunAsNonRoot {
		t.Error("the pod does not require a non-root user")
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(pod.Containers))
	}
	c := pod.Containers[0]
	argv := append(append([]string{}, c.Command...), c.Args...)
	if len(argv) < 2 || path.Base(argv[0]) != "leasectl" || argv[1] != "run" {
		t.Fatalf("the container's entrypoint is not leasectl run: %q", argv)
	}

	// leasectl's own flag parser reads the command line.
	root := cmd.NewRootCmd(&cmd.App{IO: &cmd.IOStreams{In: strings.NewReader(""), Out: io.Discard, ErrOut: io.Discard}, Getenv: func(string) string { return "" }})
	runCmd, rest, err := root.Find(argv[1:])
	if err != nil || runCmd.Name() != "run" {
		t.Fatalf("leasectl does not know %q: %v", argv[1:], err)
	}
	if err := runCmd.ParseFlags(rest); err != nil {
		t.Fatalf("leasectl run rejects the example's flags: %v", err)
	}
	if prog := runCmd.Flags().Args(); len(prog) == 0 {
		t.Error("no program after --")
	}
	grace, _ := runCmd.Flags().GetDuration("grace")
	addr, _ := runCmd.Flags().GetString("metrics-addr")
	if role, _ := runCmd.Flags().GetString("role"); role == "" {
		t.Error("no --role")
	}
	_, portText, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("--metrics-addr %q: %v", addr, err)
	}
	metricsPort, _ := strconv.Atoi(portText)

	portName := ""
	for _, p := range c.Ports {
		if p.ContainerPort == metricsPort {
			portName = p.Name
		}
	}
	if portName == "" {
		t.Errorf("the container does not declare --metrics-addr's port %d", metricsPort)
	}
	for _, pc := range []struct {
		what string
		p    *probe
		path string
	}{{"livenessProbe", c.LivenessProbe, "/healthz"}, {"readinessProbe", c.ReadinessProbe, "/readyz"}} {
		if pc.p == nil || pc.p.HTTPGet == nil {
			t.Errorf("no %s with httpGet", pc.what)
			continue
		}
		port := pc.p.HTTPGet.Port.Value
		if pc.p.HTTPGet.Path != pc.path || (port != portName && port != strconv.Itoa(metricsPort)) {
			t.Errorf("%s gets %s on port %s, want %s on the metrics port (%s, %d)", pc.what, pc.p.HTTPGet.Path, port, pc.path, portName, metricsPort)
		}
	}

	// On deletion the kubelet's SIGKILL comes terminationGracePeriodSeconds
	// after its SIGTERM: leasectl needs --grace for the program and a few
	// seconds more to release the fence and the key.
	const margin = 5 * time.Second
	if pod.TerminationGracePeriodSeconds == nil {
		t.Errorf("no terminationGracePeriodSeconds: the default 30 s must be sized against --grace %s explicitly", grace)
	} else if tgp := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second; tgp < grace+margin {
		t.Errorf("terminationGracePeriodSeconds %s does not cover --grace %s plus %s", tgp, grace, margin)
	}

	// The keys file: LEASECTL_KEYS points into a mounted ConfigMap whose
	// keys.yaml is valid and has the role.
	keysPath := ""
	for _, e := range c.Env {
		if e.Name == "LEASECTL_KEYS" {
			keysPath = e.Value
		}
	}
	var configMap string
	for _, m := range c.VolumeMounts {
		if path.Dir(keysPath) == m.MountPath {
			for _, v := range pod.Volumes {
				if v.Name == m.Name && v.ConfigMap != nil {
					configMap = v.ConfigMap.Name
				}
			}
		}
	}
	cm, ok := objects["ConfigMap/"+configMap]
	if keysPath == "" || !ok {
		t.Fatalf("LEASECTL_KEYS %q is not in a mounted ConfigMap of this file", keysPath)
	}
	f, err := keys.Parse(keysPath, []byte(cm.Data[path.Base(keysPath)]))
	if err != nil {
		t.Fatalf("the example's keys file: %v", err)
	}
	role, _ := runCmd.Flags().GetString("role")
	if _, ok := f.Role(role); !ok {
		t.Errorf("role %q is not in the example's keys file", role)
	}
}
