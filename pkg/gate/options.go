package gate

// Opt configures a [Map] made by [New].
type Opt interface {
	apply(*cfg)
}

type cfg struct {
	capacity int
}

type opt struct{ fn func(*cfg) }

func (o opt) apply(c *cfg) { o.fn(c) }

// maxCapacity bounds the Capacity hint (a 2^28-user table is 8 GiB), so
// that a wrong hint cannot overflow the size arithmetic, even where int is
// 32 bits; the table still grows past it if that many users arrive.
const maxCapacity = 1 << 28

// Capacity pre-sizes the map for n users with episodes, so that a restore of
// n users does not rebuild the table while it runs. The default is 0: start
// small and grow. Values below 0 count as 0, values above 2^28 as 2^28.
func Capacity(n int) Opt {
	return opt{func(c *cfg) { c.capacity = min(max(n, 0), maxCapacity) }}
}
