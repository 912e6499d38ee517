// A fake CRI runtime for a test kubelet: k8s.io/cri-client/pkg/fake, plus CDI resolution at
// CreateContainer as containerd does it (a container whose CDI device has no spec fails), and a
// JSON line per created container (pod, container, final environment) for the test to read.
//
// Usage: fakecri ENDPOINT CDI_DIR LOG_FILE IMAGE...
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"google.golang.org/grpc"
	kubeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	fakeremote "k8s.io/cri-client/pkg/fake"
	"k8s.io/cri-client/pkg/util"
)

type cdiSpec struct {
	Kind    string `json:"kind"`
	Devices []struct {
		Name           string `json:"name"`
		ContainerEdits struct {
			Env         []string `json:"env"`
			DeviceNodes []struct {
				Path string `json:"path"`
			} `json:"deviceNodes"`
		} `json:"containerEdits"`
	} `json:"devices"`
}

type runtime struct {
	*fakeremote.RemoteRuntime
	cdiDir string
	log    *os.File
	mu     sync.Mutex
}

func (r *runtime) resolve(name string) ([]string, []string, error) {
	kind, device, _ := strings.Cut(name, "=")
	files, _ := filepath.Glob(filepath.Join(r.cdiDir, "*.json"))
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		var spec cdiSpec
		if json.Unmarshal(data, &spec) != nil || spec.Kind != kind {
			continue
		}
		for _, d := range spec.Devices {
			if d.Name == device {
				nodes := []string{}
				for _, n := range d.ContainerEdits.DeviceNodes {
					nodes = append(nodes, n.Path)
				}
				return d.ContainerEdits.Env, nodes, nil
			}
		}
	}
	return nil, nil, fmt.Errorf("failed to inject CDI devices: unresolvable CDI devices %s", name)
}

func (r *runtime) CreateContainer(ctx context.Context, req *kubeapi.CreateContainerRequest) (*kubeapi.CreateContainerResponse, error) {
	env := map[string]string{}
	for _, kv := range req.Config.Envs {
		env[kv.Key] = string(kv.Value)
	}
	cdi, nodes := []string{}, []string{}
	for _, device := range req.Config.CDIDevices {
		edits, deviceNodes, err := r.resolve(device.Name)
		if err != nil {
			return nil, err
		}
		cdi = append(cdi, device.Name)
		nodes = append(nodes, deviceNodes...)
		for _, kv := range edits {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
	}
	labels := req.SandboxConfig.Metadata
	line, _ := json.Marshal(map[string]any{
		"namespace": labels.Namespace, "pod": labels.Name, "uid": labels.Uid,
		"container": req.Config.Metadata.Name, "cdiDevices": cdi, "deviceNodes": nodes, "env": env,
	})
	r.mu.Lock()
	fmt.Fprintln(r.log, string(line))
	r.mu.Unlock()
	return r.RemoteRuntime.CreateContainer(ctx, req)
}

func main() {
	fake := fakeremote.NewFakeRemoteRuntime()
	fake.RuntimeService.FakeStatus = &kubeapi.RuntimeStatus{
		Conditions: []*kubeapi.RuntimeCondition{
			{Type: kubeapi.RuntimeReady, Status: true},
			{Type: kubeapi.NetworkReady, Status: true},
		},
	}
	fake.ImageService.SetFakeImageSize(1)
	fake.ImageService.SetFakeImages(os.Args[4:])
	log, err := os.OpenFile(os.Args[3], os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	r := &runtime{RemoteRuntime: fake, cdiDir: os.Args[2], log: log}
	server := grpc.NewServer()
	kubeapi.RegisterRuntimeServiceServer(server, r)
	kubeapi.RegisterImageServiceServer(server, fake)
	listener, err := util.CreateListener(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	go server.Serve(listener)
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	<-signals
	server.Stop()
}
