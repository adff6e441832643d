module profcol.test/goinline

go 1.18
