#include <string.h>

#include "dataflow/datatype.h"

typedef struct {
	DataflowDatatype dtype;
	const char *name;
	size_t size;
} Datatype_Info;

static const Datatype_Info datatypes[] = {
	{DATAFLOW_FP32, "fp32", 4},
	{DATAFLOW_FP16, "fp16", 2},
	{DATAFLOW_BF16, "bf16", 2},
	{DATAFLOW_FP8E4M3, "fp8e4m3", 1},
	{DATAFLOW_FP8E5M2, "fp8e5m2", 1},
	{DATAFLOW_INT8, "int8", 1},
	{DATAFLOW_INT16, "int16", 2},
	{DATAFLOW_INT32, "int32", 4},
	{DATAFLOW_INT64, "int64", 8},
	{DATAFLOW_UINT8, "uint8", 1},
	{DATAFLOW_UINT16, "uint16", 2},
	{DATAFLOW_UINT32, "uint32", 4},
	{DATAFLOW_UINT64, "uint64", 8},
	{DATAFLOW_BOOL, "bool", 1},
	{DATAFLOW_FP64, "fp64", 8},
	{DATAFLOW_FP32_SCALAR, "fp32_scalar", 4},
	{DATAFLOW_FP64_SCALAR, "fp64_scalar", 8},
	{DATAFLOW_INT32_SCALAR, "int32_scalar", 4},
	{DATAFLOW_INT64_SCALAR, "int64_scalar", 8},
	{DATAFLOW_UINT64_SCALAR, "uint64_scalar", 8},
	{DATAFLOW_BOOL_SCALAR, "bool_scalar", 4},
};

static const Datatype_Info *find(DataflowDatatype dtype)
{
	for (size_t i = 0; i < sizeof(datatypes) / sizeof(datatypes[0]); i++)
		if (datatypes[i].dtype == dtype)
			return &datatypes[i];
	return NULL;
}

size_t dataflow_datatype_size(DataflowDatatype dtype)
{
	const Datatype_Info *info = find(dtype);
	return info ? info->size : 0;
}

const char *dataflow_datatype_name(DataflowDatatype dtype)
{
	const Datatype_Info *info = find(dtype);
	return info ? info->name : NULL;
}

DataflowDatatype dataflow_datatype_from_name(const char *name)
{
	if (!name)
		return DATAFLOW_NONE;
	for (size_t i = 0; i < sizeof(datatypes) / sizeof(datatypes[0]); i++)
		if (strcmp(datatypes[i].name, name) == 0)
			return datatypes[i].dtype;
	return DATAFLOW_NONE;
}

int dataflow_datatype_is_scalar(DataflowDatatype dtype)
{
	return dtype >= DATAFLOW_FP32_SCALAR && find(dtype) != NULL;
}

int dataflow_datatype_is_tensor(DataflowDatatype dtype)
{
	return dtype != DATAFLOW_NONE && dtype < DATAFLOW_FP32_SCALAR && find(dtype) != NULL;
}
