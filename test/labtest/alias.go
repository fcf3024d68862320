package labtest

import (
	"fmt"

	"github.com/leasectl/leasectl/internal/lab"
)

// AddPoolerAlias makes the database alias of l's running PgBouncer called
// name lead to database dbname of the server it pools, as a line
// "alias = host=… port=… dbname=…" of its [databases] section does, and
// reloads it: a client that asks for alias is served by dbname, and the
// server calls the session's database dbname. It returns once the pooler
// has logged the reload. ReconfigurePooler rewrites the configuration from
// the spec, which has no aliases, and so drops them.
func AddPoolerAlias(l *lab.Lab, name, alias, dbname string) error {
	if !isFrontDoorName(alias) || !isFrontDoorName(dbname) {
		return fmt.Errorf("pooler alias %q for %q: use 1 to 40 letters, digits, '_', '.' or '-', starting with a letter or digit", alias, dbname)
	}
	return l.ReloadPooler(name, func(p *lab.Pooler) error {
		return lab.AppendFile(p.ConfigFile, fmt.Sprintf("\n[databases]\n%s = host=127.0.0.1 port=%d dbname=%s\n", alias, l.PoolerTarget(), dbname))
	})
}
