// Command draplugin stands in for a DRA driver's kubelet plugin on the e2e node
// (tests/support/node.py), so that a Pod whose ResourceClaim the scheduler allocated can start.
//
// It registers with the kubelet as the driver named by -driver, through the published helper
// k8s.io/dynamic-resource-allocation/kubeletplugin, and answers NodePrepareResources with the
// allocated devices of that driver and no CDI devices: the container gets no device node and
// no environment from it. It refuses a claim whose devices are in a pool other than the node's
// (a DRA driver's pool is its node). It publishes no ResourceSlice (the tests write them) and
// keeps no state. Each call is printed on stdout, one line per claim; "registered" once the
// kubelet has accepted the plugin.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

type standIn struct{ driver, pool string }

func (s standIn) PrepareResourceClaims(
	_ context.Context, claims []*resourceapi.ResourceClaim,
) (map[types.UID]kubeletplugin.PrepareResult, error) {
	results := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, claim := range claims {
		var result kubeletplugin.PrepareResult
		var names []string
		for _, device := range claim.Status.Allocation.Devices.Results {
			if device.Driver != s.driver {
				continue
			}
			if device.Pool != s.pool {
				result.Err = fmt.Errorf("device %s of pool %s is not on node %s", device.Device, device.Pool, s.pool)
				break
			}
			result.Devices = append(result.Devices, kubeletplugin.Device{
				Requests:   []string{device.Request},
				PoolName:   device.Pool,
				DeviceName: device.Device,
			})
			names = append(names, device.Device)
		}
		if result.Err != nil {
			fmt.Printf("prepare %s/%s: refused: %v\n", claim.Namespace, claim.Name, result.Err)
		} else {
			fmt.Printf("prepare %s/%s: pool %s devices %v\n", claim.Namespace, claim.Name, s.pool, names)
		}
		results[claim.UID] = result
	}
	return results, nil
}

func (s standIn) UnprepareResourceClaims(
	_ context.Context, claims []kubeletplugin.NamespacedObject,
) (map[types.UID]error, error) {
	results := make(map[types.UID]error, len(claims))
	for _, claim := range claims {
		fmt.Printf("unprepare %s/%s\n", claim.Namespace, claim.Name)
		results[claim.UID] = nil
	}
	return results, nil
}

func (s standIn) HandleError(_ context.Context, err error, msg string) {
	fmt.Fprintf(os.Stderr, "%s: %v\n", msg, err)
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "the node's kubeconfig (reads the claims to prepare)")
	node := flag.String("node-name", "", "the node, and the name of its pool")
	driver := flag.String("driver", "", "the DRA driver to stand in for, e.g. tpu.google.com")
	registrar := flag.String("registrar-dir", "", "the kubelet's plugins_registry directory")
	socketDir := flag.String("plugin-dir", "", "where this plugin's socket goes")
	flag.Parse()
	if err := run(*kubeconfig, *node, *driver, *registrar, *socketDir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(kubeconfig, node, driver, registrar, socketDir string) error {
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(socketDir, 0o750); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	helper, err := kubeletplugin.Start(ctx, standIn{driver: driver, pool: node},
		kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(node),
		kubeletplugin.DriverName(driver),
		kubeletplugin.RegistrarDirectoryPath(registrar),
		kubeletplugin.PluginDataDirectoryPath(socketDir),
	)
	if err != nil {
		return err
	}
	defer helper.Stop()
	for ctx.Err() == nil {
		if status := helper.RegistrationStatus(); status != nil && status.PluginRegistered {
			fmt.Println("registered")
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	<-ctx.Done()
	return nil
}
