// The floor: the cheapest admission webhook there can be, for `python -m bench.create`.
//
// Go's net/http over TLS, HTTP/1.1 only (as tpu-webhook serves), no logging and no metrics. It
// reads the review's uid and answers what tpu-webhook answers for the benchmark's objects: on
// /mutate the patch given with -patch (base64 JSON Patch) unless the object already declares the
// first of its ports, otherwise allowed. What the API server adds to a create with this server
// registered is what it charges for calling any webhook; the rest of tpu-webhook's figure is ours.
//
//	floor -addr 127.0.0.1:9443 -cert tls.crt -key tls.key -patch <base64> -done '"containerPort":8471'
package main

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"flag"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
)

type review struct {
	Request struct {
		UID string `json:"uid"`
	} `json:"request"`
}

type response struct {
	UID       string `json:"uid"`
	Allowed   bool   `json:"allowed"`
	PatchType string `json:"patchType,omitempty"`
	Patch     string `json:"patch,omitempty"`
}

type answer struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Response   response `json:"response"`
}

func handler(patch string, done []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		var in review
		if err == nil {
			err = json.Unmarshal(body, &in)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		out := answer{"admission.k8s.io/v1", "AdmissionReview", response{UID: in.Request.UID, Allowed: true}}
		if r.URL.Path == "/mutate" && !bytes.Contains(body, done) {
			out.Response.PatchType, out.Response.Patch = "JSONPatch", patch
		}
		data, _ := json.Marshal(out)
		w.Header().Set("Content-Type", "application/json")
		w.Write(data)
	}
}

func main() {
	addr := flag.String("addr", "127.0.0.1:9443", "listen address")
	cert := flag.String("cert", "tls.crt", "serving certificate")
	key := flag.String("key", "tls.key", "its key")
	patch := flag.String("patch", "", "base64 JSON Patch answered on /mutate")
	done := flag.String("done", "", "bytes whose presence in a review means nothing to patch")
	flag.Parse()
	server := &http.Server{
		Addr:         *addr,
		Handler:      handler(*patch, []byte(*done)),
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){}, // HTTP/1.1
		ErrorLog:     log.New(io.Discard, "", 0),
	}
	go func() {
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
		<-stop
		server.Close()
	}()
	if err := server.ListenAndServeTLS(*cert, *key); err != http.ErrServerClosed {
		log.Fatal(err)
	}
}
