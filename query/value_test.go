package query

import (
	"math"
	"strconv"
	"strings"
	"testing"
)

// parseNumSlow is parseNum without its digits fast path.
func parseNumSlow(s string) (float64, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, false
	}
	if c := s[0]; !(c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.') {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

func sameParse(t *testing.T, s string) {
	t.Helper()
	f, ok := parseNum(s)
	g, gok := parseNumSlow(s)
	if ok != gok || math.Float64bits(f) != math.Float64bits(g) {
		t.Fatalf("parseNum(%q) = %v, %v; ParseFloat gives %v, %v", s, f, ok, g, gok)
	}
}

func TestParseNumDigits(t *testing.T) {
	for _, s := range []string{"0", "7", "00012", "123", " 42 ", "999999999999999", "9999999999999999",
		"123456789012345678", "12a", "1.5", "-3", "+4", "1e3", "0x10", "", " ", "1_000"} {
		sameParse(t, s)
	}
}

// FuzzParseNum: the digits fast path gives ParseFloat's answer, bit for bit.
func FuzzParseNum(f *testing.F) {
	for _, s := range []string{"123", "000", "1.5", "-0", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(sameParse)
}
