// Command etcd runs a single-member etcd on loopback for the local e2e cluster: the embed package is
// the smallest way to get an etcd built from the module proxy alone.
package main

import (
	"flag"
	"log"
	"net/url"
	"os"
	"os/signal"
	"syscall"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	dir := flag.String("data-dir", "/var/lib/csi-fat-e2e/etcd", "where etcd keeps its data")
	flag.Parse()

	cfg := embed.NewConfig()
	cfg.Dir = *dir
	client, _ := url.Parse("http://127.0.0.1:2379")
	peer, _ := url.Parse("http://127.0.0.1:2380")
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	cfg.LogLevel = "warn"

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		log.Fatalf("etcd: %v", err)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-e.Server.ReadyNotify():
		log.Printf("etcd ready on %s", client)
	case <-stop:
		e.Close()
		return
	}
	select {
	case err := <-e.Err():
		log.Fatalf("etcd: %v", err)
	case <-stop:
		e.Close()
	}
}
