// The cluster's local registry: go-containerregistry's in-memory OCI
// registry (its cmd/registry binds 127.0.0.1 only, which the other nodes
// cannot reach), on the address given. It takes any push, unauthenticated:
// it runs on the cluster's own network and holds test images only.
package main

import (
	"flag"
	"log"
	"net/http"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

func main() {
	listen := flag.String("listen", "", "host:port to serve on (required)")
	flag.Parse()
	if *listen == "" {
		log.Fatal("registry: --listen: required (host:port)")
	}
	srv := &http.Server{Addr: *listen, Handler: registry.New(), ReadHeaderTimeout: 10 * time.Second}
	log.Printf("registry: serving on %s", *listen)
	log.Fatal(srv.ListenAndServe())
}
