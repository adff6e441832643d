// Package profilesink is an exporter for the Go collector built in these tests: it
// writes every batch it is given, as the Go marshaler encodes it (resource attributes
// turned into string-table references), to one file framed as otelcol's file exporter
// frames protobuf (a 4-byte big-endian length before each message).
package profilesink

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"sync"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/xexporter"
	"go.opentelemetry.io/collector/pdata/pprofile"
)

// Config: where the batches go.
type Config struct {
	Path string `mapstructure:"path"`
}

func (c *Config) Validate() error {
	if c.Path == "" {
		return errors.New("path is required")
	}
	return nil
}

var typ = component.MustNewType("profilesink")

// NewFactory makes the `profilesink` exporter.
func NewFactory() xexporter.Factory {
	return xexporter.NewFactory(typ,
		func() component.Config { return &Config{} },
		xexporter.WithProfiles(create, component.StabilityLevelDevelopment))
}

func create(_ context.Context, _ exporter.Settings, cfg component.Config) (xexporter.Profiles, error) {
	return &sink{path: cfg.(*Config).Path}, nil
}

type sink struct {
	path string
	mu   sync.Mutex
	file *os.File
}

func (s *sink) Start(context.Context, component.Host) error {
	f, err := os.OpenFile(s.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	s.file = f
	return nil
}

func (s *sink) Shutdown(context.Context) error {
	if s.file == nil {
		return nil
	}
	return s.file.Close()
}

func (s *sink) Capabilities() consumer.Capabilities { return consumer.Capabilities{} }

func (s *sink) ConsumeProfiles(_ context.Context, p pprofile.Profiles) error {
	var m pprofile.ProtoMarshaler
	buf, err := m.MarshalProfiles(p)
	if err != nil {
		return err
	}
	frame := make([]byte, 4, 4+len(buf))
	binary.BigEndian.PutUint32(frame, uint32(len(buf)))
	frame = append(frame, buf...)
	s.mu.Lock()
	defer s.mu.Unlock()
	// One write per frame, so a reader polling the file sees whole frames or none
	// (O_APPEND, regular file).
	_, err = s.file.Write(frame)
	return err
}
