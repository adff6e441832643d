module profcol.test/fixgen

go 1.18
