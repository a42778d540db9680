package query_test

import (
	"github.com/quarry-dev/quarry/query"
	"github.com/quarry-dev/quarry/query/querytest"
)

// The oracle lives in querytest, which imports query; query's own tests
// reach it through this hook (see ReferenceSearchForTest).
func init() { query.ReferenceSearchForTest = querytest.ReferenceSearch }
