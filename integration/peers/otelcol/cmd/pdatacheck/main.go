// pdatacheck reads profcol's output files with the Go collector's pdata
// (go.opentelemetry.io/collector/pdata/pprofile) and prints their summary as JSON. Every
// reference in them must resolve; otherwise it exits 1 saying which.
//
//	pdatacheck proto-framed FILE   otelcol file exporter protobuf (4-byte length + message)...
//	pdatacheck json-lines FILE     one OTLP/JSON ProfilesData per line
//	pdatacheck proto FILE          one ProfilesData message (profcol convert --to otlp)
//	pdatacheck json FILE           one OTLP/JSON ProfilesData (profcol convert --to otlp-json)
package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"

	"go.opentelemetry.io/collector/pdata/pprofile"

	"profcol.dev/peers/otelcol/summary"
)

func messages(format string, data []byte) ([][]byte, error) {
	switch format {
	case "proto", "json":
		return [][]byte{data}, nil
	case "proto-framed":
		var out [][]byte
		for len(data) > 0 {
			if len(data) < 4 {
				return nil, fmt.Errorf("%d trailing bytes: not a whole length prefix", len(data))
			}
			n := binary.BigEndian.Uint32(data)
			if uint64(n) > uint64(len(data)-4) {
				return nil, fmt.Errorf("frame of %d bytes but %d left", n, len(data)-4)
			}
			out = append(out, data[4:4+n])
			data = data[4+n:]
		}
		return out, nil
	case "json-lines":
		var out [][]byte
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(nil, 1<<30)
		for sc.Scan() {
			if line := bytes.TrimSpace(sc.Bytes()); len(line) > 0 {
				out = append(out, append([]byte(nil), line...))
			}
		}
		return out, sc.Err()
	}
	return nil, fmt.Errorf("unknown format %q", format)
}

func run(format, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	msgs, err := messages(format, data)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	s := summary.New()
	for i, m := range msgs {
		var p pprofile.Profiles
		switch format {
		case "proto", "proto-framed":
			p, err = (&pprofile.ProtoUnmarshaler{}).UnmarshalProfiles(m)
		default:
			p, err = (&pprofile.JSONUnmarshaler{}).UnmarshalProfiles(m)
		}
		if err != nil {
			return fmt.Errorf("%s: message %d: pdata cannot read it: %w", path, i, err)
		}
		if err := s.Add(p); err != nil {
			return fmt.Errorf("%s: message %d: %w", path, i, err)
		}
	}
	return json.NewEncoder(os.Stdout).Encode(s)
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: pdatacheck proto-framed|json-lines|proto|json FILE")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Args[2]); err != nil {
		fmt.Fprintln(os.Stderr, "pdatacheck:", err)
		os.Exit(1)
	}
}
