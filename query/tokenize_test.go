package query

import (
	"reflect"
	"testing"
)

func TestTerms(t *testing.T) {
	cases := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"ERROR timeout", []string{"error", "timeout"}},
		{`192.168.1.10 - - "GET /api/v1/cart HTTP/1.1" 200`, []string{"192.168.1.10", "192", "168", "1", "10", "get", "api/v1/cart", "api", "v1", "cart", "http/1.1", "http", "200"}},
		{"foo. (bar)", []string{"foo", "bar"}},
		{"a=b,c", []string{"a=b", "a", "b", "c"}},
		{"...", nil},
	}
	for _, c := range cases {
		if got := Terms(c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("Terms(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
