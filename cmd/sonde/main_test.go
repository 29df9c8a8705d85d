package main

import (
	"testing"

	"github.com/sondeprobe/sonde/bench/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
