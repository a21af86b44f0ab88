module huntlb.local/registry

go 1.24

require github.com/google/go-containerregistry v0.20.6
