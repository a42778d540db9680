package store

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestMaxDataSizeRolls: a hot bucket of an index with a max_data_size
// smaller than MaxHotBytes rolls once its event bytes reach it; other
// indexes keep MaxHotBytes; a size above MaxHotBytes changes nothing.
func TestMaxDataSizeRolls(t *testing.T) {
	st, err := Open(Options{Dir: t.TempDir(), GUID: "g1", Searchable: true, MaxHotBytes: 1 << 20, BlockInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	st.Limits().SetMaxDataSizes(map[string]int64{"small": 4096, "big": 4 << 20})
	if st.Limits().MaxDataSize("small") != 4096 || st.Limits().MaxDataSize("big") != 1<<20 || st.Limits().MaxDataSize("main") != 1<<20 {
		t.Fatalf("sizes small %d big %d main %d", st.Limits().MaxDataSize("small"), st.Limits().MaxDataSize("big"), st.Limits().MaxDataSize("main"))
	}
	now := time.Now().UnixNano()
	var evs []Event
	for _, index := range []string{"small", "main"} {
		for i := range 100 {
			evs = append(evs, Event{Index: index, Time: now + int64(i), Raw: []byte(fmt.Sprintf("ev%d %s", i, strings.Repeat("x", 200)))})
		}
	}
	_, err = st.Append(evs)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		per := map[string]int{}
		warm := map[string]int{}
		for _, c := range st.Inventory() {
			per[c.Index]++
			if c.State == string(StateWarm) {
				warm[c.Index]++
				if c.Index == "small" && c.Events > 4096/200+1 {
					t.Fatalf("bucket %s holds %d events of over 200 bytes, over 4096", c.ID, c.Events)
				}
			}
		}
		if warm["small"] >= 4 && per["main"] == 1 && warm["main"] == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("buckets per index %v, warm %v", per, warm)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
