package knowledge

import "testing"

// FuzzParseSearchBundle: any props.conf, transforms.conf, eventtypes.conf,
// tags.conf and lookup CSV either parse or are refused with an error;
// never a panic. A parsed bundle answers every query method.
func FuzzParseSearchBundle(f *testing.F) {
	f.Add("[web]\nEXTRACT-u = u=(?<user>\\w+) in _raw\nREPORT-a = t\nFIELDALIAS-x = user AS who\nEVAL-y = 1+1\nLOOKUP-l = lk user OUTPUT team\nKV_MODE = json\n",
		"[t]\nREGEX = (\\w+)=(\\w+)\nFORMAT = $1::$2\n\n[lk]\nfilename = l.csv\n", "[e]\nsearch = user=a\n", "[e=x]\ntag1 = enabled\n", "user,team\na,b\n")
	f.Add("[default]\nKV_MODE = none\n", "", "", "", "")
	f.Fuzz(func(t *testing.T, props, transforms, eventtypes, tags, csv string) {
		b, err := ParseSearchBundle(Files{PropsConf: []byte(props), TransformsConf: []byte(transforms),
			EventtypesConf: []byte(eventtypes), TagsConf: []byte(tags), LookupsDir + "l.csv": []byte(csv)})
		if err != nil {
			return
		}
		_ = b.Hash()
		for _, st := range append(b.Sourcetypes(), "", "web") {
			if r := b.For(st); r != nil {
				for i := range r.Extracts {
					r.Extracts[i].Apply("u=ann k=v x=1", func(k, v string) {})
				}
			}
		}
		_ = b.Eventtypes("*")
		_ = b.Tagged("*")
		_ = b.EvalDefs()
	})
}

// FuzzLookupSpec: a LOOKUP- value or lookup command never panics the
// parser, and a parsed one names a table and an input.
func FuzzLookupSpec(f *testing.F) {
	f.Add("teams user AS who OUTPUTNEW team AS squad")
	f.Add("t a, b OUTPUT")
	f.Fuzz(func(t *testing.T, v string) {
		l, err := ParseLookupSpec(v)
		if err == nil && (l.Table == "" || len(l.In) == 0) {
			t.Fatalf("%q parsed as %+v", v, l)
		}
	})
}
