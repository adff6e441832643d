// Package summary reduces OTLP profiles, as Go's pdata reads them, to what a profile
// means (sample totals per type, per folded stack, per attribute), so that profcol's
// tests can compare what the Go collector received with what profcol sent.
//
// The same reduction is written in Rust in integration/src/peer_summary.rs; the two must
// agree field for field.
package summary

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pprofile"
)

// Summary is what a batch (or many) says, independent of how its tables are laid out.
type Summary struct {
	Batches  int `json:"batches"`
	Profiles int `json:"profiles"`
	Samples  int `json:"samples"`
	// Per sample type ("type/unit"): the sum of sample values (a sample without values
	// counts its timestamps).
	Totals map[string]int64 `json:"totals"`
	// Per "type/unit|root;...;leaf": the same sums by folded stack.
	Stacks map[string]int64 `json:"stacks"`
	// Per "key=value" of every resource: how many resource profiles carry it.
	Resource map[string]int `json:"resource"`
	// Per "key=value" of sample attributes: the summed sample value.
	SampleAttributes map[string]int64 `json:"sample_attributes"`
}

func New() *Summary {
	return &Summary{
		Totals:           map[string]int64{},
		Stacks:           map[string]int64{},
		Resource:         map[string]int{},
		SampleAttributes: map[string]int64{},
	}
}

// Problem is a reference that does not resolve: the batch is not what OTLP allows.
type Problem struct{ What string }

func (p Problem) Error() string { return p.What }

func str(d pprofile.ProfilesDictionary, i int32, what string) (string, error) {
	t := d.StringTable()
	if i < 0 || int(i) >= t.Len() {
		return "", Problem{fmt.Sprintf("%s: string index %d out of range (%d strings)", what, i, t.Len())}
	}
	return t.At(int(i)), nil
}

// Value renders an attribute value; only strings, ints and bools are spelled out, the
// rest by kind (their encodings differ by language, their presence does not).
func Value(v pcommon.Value) string {
	switch v.Type() {
	case pcommon.ValueTypeStr:
		return v.Str()
	case pcommon.ValueTypeInt:
		return strconv.FormatInt(v.Int(), 10)
	case pcommon.ValueTypeBool:
		return strconv.FormatBool(v.Bool())
	case pcommon.ValueTypeEmpty:
		return ""
	default:
		return "<" + strings.ToLower(v.Type().String()) + ">"
	}
}

func frame(d pprofile.ProfilesDictionary, li int32) ([]string, error) {
	locs := d.LocationTable()
	if li <= 0 || int(li) >= locs.Len() {
		return nil, Problem{fmt.Sprintf("location index %d out of range (%d locations)", li, locs.Len())}
	}
	loc := locs.At(int(li))
	lines := loc.Lines()
	if lines.Len() == 0 {
		file := ""
		if m := loc.MappingIndex(); m != 0 {
			if int(m) >= d.MappingTable().Len() || m < 0 {
				return nil, Problem{fmt.Sprintf("mapping index %d out of range", m)}
			}
			f, err := str(d, d.MappingTable().At(int(m)).FilenameStrindex(), "mapping filename")
			if err != nil {
				return nil, err
			}
			file = f
		}
		return []string{fmt.Sprintf("%s+0x%x", file, loc.Address())}, nil
	}
	// lines[0] is the innermost function; the stack is written leaf first.
	out := make([]string, 0, lines.Len())
	for i := 0; i < lines.Len(); i++ {
		fi := lines.At(i).FunctionIndex()
		if fi < 0 || int(fi) >= d.FunctionTable().Len() {
			return nil, Problem{fmt.Sprintf("function index %d out of range", fi)}
		}
		name, err := str(d, d.FunctionTable().At(int(fi)).NameStrindex(), "function name")
		if err != nil {
			return nil, err
		}
		out = append(out, name)
	}
	return out, nil
}

// Add folds one batch in.
func (s *Summary) Add(p pprofile.Profiles) error {
	s.Batches++
	d := p.Dictionary()
	for i := 0; i < p.ResourceProfiles().Len(); i++ {
		rp := p.ResourceProfiles().At(i)
		for k, v := range rp.Resource().Attributes().All() {
			s.Resource[k+"="+Value(v)]++
		}
		for j := 0; j < rp.ScopeProfiles().Len(); j++ {
			sp := rp.ScopeProfiles().At(j)
			for k := 0; k < sp.Profiles().Len(); k++ {
				if err := s.addProfile(d, sp.Profiles().At(k)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

func (s *Summary) addProfile(d pprofile.ProfilesDictionary, prof pprofile.Profile) error {
	s.Profiles++
	ty, err := str(d, prof.SampleType().TypeStrindex(), "sample type")
	if err != nil {
		return err
	}
	unit, err := str(d, prof.SampleType().UnitStrindex(), "sample unit")
	if err != nil {
		return err
	}
	kind := ty + "/" + unit
	for i := 0; i < prof.Samples().Len(); i++ {
		sample := prof.Samples().At(i)
		s.Samples++
		var value int64
		if sample.Values().Len() == 0 {
			value = int64(sample.TimestampsUnixNano().Len())
		}
		for _, v := range sample.Values().All() {
			value += v
		}
		si := sample.StackIndex()
		if si < 0 || int(si) >= d.StackTable().Len() {
			return Problem{fmt.Sprintf("stack index %d out of range (%d stacks)", si, d.StackTable().Len())}
		}
		var frames []string
		for _, li := range d.StackTable().At(int(si)).LocationIndices().All() {
			f, err := frame(d, li)
			if err != nil {
				return err
			}
			frames = append(frames, f...)
		}
		for a, b := 0, len(frames)-1; a < b; a, b = a+1, b-1 {
			frames[a], frames[b] = frames[b], frames[a]
		}
		s.Totals[kind] += value
		s.Stacks[kind+"|"+strings.Join(frames, ";")] += value
		for _, ai := range sample.AttributeIndices().All() {
			if ai <= 0 || int(ai) >= d.AttributeTable().Len() {
				return Problem{fmt.Sprintf("attribute index %d out of range", ai)}
			}
			kv := d.AttributeTable().At(int(ai))
			key, err := str(d, kv.KeyStrindex(), "attribute key")
			if err != nil {
				return err
			}
			s.SampleAttributes[key+"="+Value(kv.Value())] += value
		}
	}
	return nil
}

// Keys lists a map's keys in order, for stable messages.
func Keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
