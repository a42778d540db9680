package query

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Packed perc/median values (aggState.NB; issue 27): a partial of
// `perc90(bytes)` over 20k events sent 20k JSON numbers, each formatted
// by the peer and parsed by the head. Packed, in the order listed (the
// head's answer must not depend on the form):
//
//   - numsInts: every value is an integer of magnitude below 2^53 (exact
//     in a float64; not -0): each as the zigzag uvarint of its difference
//     from the value before it (the first from 0) — 2 to 3 bytes for a
//     byte count;
//   - numsFloats: otherwise, each value's IEEE 754 bits, 8 bytes little
//     endian (NaN and infinities kept as they are).
const (
	numsInts   byte = 1
	numsFloats byte = 2
)

// maxExactInt is 2^53: integers below it in magnitude are exact floats.
const maxExactInt = 1 << 53

func packNums(nums []float64) []byte {
	ints := true
	for _, f := range nums {
		if f != math.Trunc(f) || math.Abs(f) >= maxExactInt || (f == 0 && math.Signbit(f)) {
			ints = false
			break
		}
	}
	if !ints {
		b := make([]byte, 1, 1+8*len(nums))
		b[0] = numsFloats
		for _, f := range nums {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
		}
		return b
	}
	b := make([]byte, 1, 1+3*len(nums))
	b[0] = numsInts
	prev := int64(0)
	for _, f := range nums {
		v := int64(f)
		b = binary.AppendVarint(b, v-prev)
		prev = v
	}
	return b
}

// unpackNums reads packNums' form; anything else is an error, never a
// guess.
func unpackNums(b []byte) ([]float64, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("packed values without a form")
	}
	form, b := b[0], b[1:]
	switch form {
	case numsFloats:
		if len(b)%8 != 0 {
			return nil, fmt.Errorf("packed floats of %d bytes", len(b))
		}
		out := make([]float64, len(b)/8)
		for i := range out {
			out[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
		}
		return out, nil
	case numsInts:
		out := make([]float64, 0, len(b)/2)
		prev := int64(0)
		for len(b) > 0 {
			d, n := binary.Varint(b)
			if n <= 0 {
				return nil, fmt.Errorf("bad varint at %d bytes from the end", len(b))
			}
			b = b[n:]
			v := prev + d
			if v <= -maxExactInt || v >= maxExactInt || (d > 0 && v < prev) || (d < 0 && v > prev) {
				return nil, fmt.Errorf("a packed integer out of range")
			}
			out = append(out, float64(v))
			prev = v
		}
		return out, nil
	}
	return nil, fmt.Errorf("packed values of unknown form %d", form)
}
