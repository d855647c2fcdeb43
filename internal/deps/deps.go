package main

import (
	_ "github.com/NVIDIA/go-nvml/pkg/nvml"
	_ "github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	_ "github.com/go-chi/chi/v5"
	_ "github.com/klauspost/compress/zstd"
	_ "github.com/minio/minio-go/v7"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/prometheus/client_golang/prometheus/testutil"
	_ "github.com/rs/zerolog"
	_ "golang.org/x/sync/errgroup"
	_ "sigs.k8s.io/yaml"
)

func main() {}
