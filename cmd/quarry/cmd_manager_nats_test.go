package main

import (
	"testing"
	"time"
)

func TestManagerNATSFlags(t *testing.T) {
	cfg, err := runManagerFlags(t, "--id", "m1", "--data-dir", "/d", "--admin-token", "T",
		"--nats", "nats://127.0.0.1:4222", "--nats-user", "mgr", "--nats-password", "pw",
		"--subject-prefix", "q2", "--nats-connect-timeout", "3s", "--target-timeout", "1500ms")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NATS != "nats://127.0.0.1:4222" || cfg.NATSUser != "mgr" || cfg.NATSPassword != "pw" || cfg.NATSPrefix != "q2" ||
		cfg.NATSConnectTimeout != 3*time.Second || cfg.TargetTimeout != 1500*time.Millisecond {
		t.Fatalf("manager config %+v", cfg)
	}
	// Without --nats the manager runs with the HTTP API only.
	t.Setenv("QUARRY_NATS", "")
	cfg, err = runManagerFlags(t, "--id", "m1", "--data-dir", "/d", "--admin-token", "T")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NATS != "" {
		t.Fatalf("default --nats %q, want empty", cfg.NATS)
	}
}
